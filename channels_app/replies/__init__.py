"""Response bodies, one module per resource, and the base they share.

Each body is a pydantic model (`Reply`): fields snake_case here and camelCase on
the wire (`to_camel` aliases), one per line; `Model.of(row)` builds it from rows a
view already loaded, so rendering costs no query. The same models give the OpenAPI
document its response schemas (`channels_app.schema`): what is documented is what is sent.
"""
