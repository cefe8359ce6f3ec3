"""A KoboToolbox-shaped survey for the webhook tests: its schema and its submissions, as
KoboToolbox's REST Services send them (every answer as text, group paths, metadata)."""

from __future__ import annotations

import base64
import json
from typing import Any

SCHEMA = """
[surveys.schema]
instanceID = { role = "identifier", type = "str" }
"household/age" = { role = "quasi_identifier", type = "int", min = 16, max = 110 }
"household/size" = { role = "quasi_identifier", type = "int", min = 1, max = 30 }
education = { role = "quasi_identifier", type = "ordinal", levels = LEVELS }
region = { role = "confidential", type = "str" }
"services/water" = { role = "confidential", type = "bool" }
"services/electricity" = { role = "confidential", type = "bool" }
"services/gas" = { role = "confidential", type = "bool" }
satisfaction = { role = "confidential", type = "int", min = 1, max = 5 }
""".replace("LEVELS", '["primary", "secondary", "tertiary"]')
USERNAME = "kobo"
PASSWORD = "a-webhook-password-for-tests"
SERVICES = ("water", "electricity", "gas")


def webhook_section(fmt: str = "kobo", **more: Any) -> str:
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in more.items())
    return f'\n[surveys.webhook]\nformat = "{fmt}"\nusername = "{USERNAME}"\n{extra}'


def basic(username: str = USERNAME, password: str = PASSWORD) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def submission(i: int, **override: Any) -> dict[str, Any]:
    """KoboToolbox's JSON for submission ``i``: answers as text, with its metadata."""
    body: dict[str, Any] = {
        "_id": 1000 + i, "_uuid": f"5a3c{i:08x}-0000-4000-8000-000000000000",
        "formhub/uuid": "0f3a9c5e2b8d4e6f", "__version__": "vKx7Qp3", "start":
        "2026-11-27T09:00:00.000+01:00", "end": "2026-11-27T09:07:12.000+01:00",
        "_submission_time": "2026-11-27T08:07:13", "_xform_id_string": "aBcDeFgHiJ",
        "_attachments": [], "_geolocation": [None, None], "_status": "submitted_via_web",
        "_tags": [], "_notes": [], "_validation_status": {}, "_submitted_by": None,
        "meta/instanceID": f"uuid:5a3c{i:08x}-0000-4000-8000-000000000000",
        "household/age": str(18 + i * 7 % 70), "household/size": str(1 + i % 6),
        "education": ("primary", "secondary", "tertiary")[i % 3],
        "region": ("north", "south")[i % 2],
        "services": " ".join(s for j, s in enumerate(SERVICES) if (i >> j) & 1),
        "satisfaction": str(1 + i % 5),
    }
    body.update(override)
    return {k: v for k, v in body.items() if v is not DROP}


DROP = object()
