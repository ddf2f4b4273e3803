"""The agent tools' definitions (retrieval/tools/registry.py) for OpenAI function calling,
Anthropic tool use and MCP.

Each tool is a REST operation: its input (and result) JSON Schema is read from the OpenAPI
schema drf-spectacular generates from the REST serializers, with every `$ref` resolved, so
the definitions an agent is given cannot drift from what the endpoints validate. The
descriptions tell an agent when to use a tool and how to cite.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from retrieval.tools.registry import SERVED, TOOLS, Tool

FORMATS = ("openai", "anthropic", "mcp")


def tool_definitions(fmt: str) -> list[dict[str, Any]]:
    """Every tool in the format `fmt` (one of FORMATS)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    return [_shaped(fmt, tool) for tool in TOOLS]


def input_schema(name: str) -> dict[str, Any]:
    return copy.deepcopy(_schemas()[name][0])


def output_schema(name: str) -> dict[str, Any]:
    return copy.deepcopy(_schemas()[name][1])


def _shaped(fmt: str, tool: Tool) -> dict[str, Any]:
    params = input_schema(tool.name)
    if fmt == "openai":
        return {"type": "function", "function": {"name": tool.name,
                                                 "description": tool.description,
                                                 "parameters": params}}
    if fmt == "anthropic":
        return {"name": tool.name, "description": tool.description, "input_schema": params}
    return {"name": tool.name, "description": tool.description, "inputSchema": params,
            "outputSchema": output_schema(tool.name)}


@lru_cache(maxsize=1)
def _schemas() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """name → (input, 200 result) JSON Schemas, from the OpenAPI schema (built once)."""
    from drf_spectacular.generators import SchemaGenerator

    openapi = SchemaGenerator().get_schema(request=None, public=True)
    components = openapi["components"]["schemas"]
    found = {}
    for tool in SERVED:
        operation = openapi["paths"][tool.path][tool.method]
        body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        params = _closed(_resolved(body["schema"], components)) if body else \
            _arguments(operation.get("parameters", []))
        params.setdefault("properties", {})
        if not body and tool.contract is not None and "on_behalf_of" in tool.contract().fields:
            # Its query's `user` and `group` over REST: the object every other tool takes.
            params["properties"]["on_behalf_of"] = _closed(_resolved(
                {"$ref": "#/components/schemas/OnBehalfOfRequest"}, components))
        result = operation["responses"]["200"]["content"]["application/json"]["schema"]
        found[tool.name] = (params, _resolved(result, components))
    return found


def _arguments(parameters: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool read by its URL: the path's arguments as its input object."""
    path = [p for p in parameters if p["in"] == "path"]  # its query's `on_behalf_of`: _schemas
    return {"type": "object", "additionalProperties": False,
            "properties": {p["name"]: {**p["schema"], **({"description": p["description"]}
                                                          if p.get("description") else {})}
                           for p in path},
            "required": [p["name"] for p in path]} if path else {
        "type": "object", "additionalProperties": False}


def _closed(schema: Any) -> Any:
    """Every object of an input with `additionalProperties: false`: a model sends no key of
    its own (the endpoints ignore one at the top, and refuse one inside `filters`)."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _closed(value) for key, value in schema.items()}
    if "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


def _resolved(schema: Any, components: Mapping[str, Any]) -> Any:
    """JSON Schema: every `$ref` inlined, OpenAPI's `nullable` as a "null" type, its
    `readOnly`/`writeOnly` dropped."""
    if isinstance(schema, list):
        return [_resolved(item, components) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _resolved(components[schema["$ref"].rsplit("/", 1)[1]], components)
    out = {key: _resolved(value, components) for key, value in schema.items()
           if key not in ("readOnly", "writeOnly", "nullable")}
    if schema.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    elif schema.get("nullable") and "allOf" in out:  # a nullable component: it, or null
        inner = out.pop("allOf")
        out["anyOf"] = [*inner, {"type": "null"}] if len(inner) == 1 else [
            {"allOf": inner}, {"type": "null"}]
    return out
