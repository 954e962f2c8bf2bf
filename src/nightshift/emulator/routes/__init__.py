"""The emulator's HTTP routes, one module per API it speaks, each a module-level ``router``.

* ``anthropic_messages``: ``POST /v1/messages``
* ``anthropic_batches``: ``/v1/messages/batches`` (create, list, retrieve, cancel, delete, results)
* ``openai_chat``: ``POST /v1/chat/completions``
* ``openai_files``: ``/v1/files`` (upload, list, retrieve, content, delete)
* ``openai_batches``: ``/v1/batches`` (create, list, retrieve, cancel)
* ``gemini``: ``/v1beta/models/...`` (generate, stream, batch), ``/v1beta/batches``, Gemini's files
* ``admin``: ``/_emulator/...`` for tests and demos

Routes get the emulator state of the app that received the request through ``deps.State``, so
every app ``create_app`` builds shares the routers and keeps its own state.
"""
