"""An answer checked against the OpenAPI document: its status is declared for the operation, and its JSON body
matches the schema declared for that status."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema


def check_answer(document: dict[str, Any], method: str, template: str, response: httpx.Response) -> None:
    """Assert ``response`` (to ``method`` on the path ``template``) is as ``document`` declares it."""
    declared = document["paths"][template][method.lower()]["responses"]
    status = str(response.status_code)
    assert status in declared, (method, template, status, sorted(declared), response.text[:300])
    content = declared[status]["content"]
    media = response.headers["content-type"].split(";")[0]
    assert media in content, (method, template, status, media, sorted(content))
    if media == "application/json":
        schema = {**content[media]["schema"], "components": document["components"]}
        jsonschema.validate(response.json(), schema, cls=jsonschema.Draft202012Validator)
