"""The README's configuration example is a valid configuration."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from streamanon.service.config import parse_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

README = Path(__file__).resolve().parents[1] / "README.md"


def test_configuration_reference_parses():
    text = README.read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    reference = next(b for b in blocks if "[[surveys]]" in b)
    config = parse_config(tomllib.loads(reference),
                          {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    survey = config.surveys[0]
    assert survey.deadline == 3600 and survey.k == 10
    assert set(survey.fields) >= {"respondent_id", "age", "income", "satisfaction"}
