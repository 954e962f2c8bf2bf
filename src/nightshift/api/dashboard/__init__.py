"""The web dashboard: static files (``static/``) and the router that serves them at ``/``.

The page holds no data: its JavaScript calls the JSON API with the key the user gives it, so the
router is public.
"""
