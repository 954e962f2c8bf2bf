"""Client commands: ``nightshift agents``, ``batch`` and ``sleeptime`` talk to a running server over HTTP.

``client`` holds the HTTP client, the shared ``--server`` / ``--api-key`` options and how errors
are shown; ``agents_file`` and ``requests_file`` check input files before anything is sent;
``views`` renders the API's bodies; ``watch`` follows a run; ``agents`` and ``batch`` are the
typer sub-apps that ``nightshift.cli`` registers, with ``sleeptime`` (step sleep-time agents now).
"""

from nightshift.cli_commands.agents import agents_app
from nightshift.cli_commands.batch import batch_app
from nightshift.cli_commands.sleeptime import sleeptime_app

__all__ = ["agents_app", "batch_app", "sleeptime_app"]
