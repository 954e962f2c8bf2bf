"""Organizations own every object; users hold API keys that map a caller to one organization."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

DEFAULT_ORG_ID = "org-00000000-0000-4000-8000-000000000000"
DEFAULT_ORG_NAME = "default"


@dataclass(frozen=True, slots=True, kw_only=True)
class Organization:
    id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    id: str
    organization_id: str
    name: str
    created_at: datetime
