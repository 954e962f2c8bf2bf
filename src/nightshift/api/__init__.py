"""The HTTP API: FastAPI app, routers, auth and the mapping of errors to status codes."""
