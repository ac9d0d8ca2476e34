"""The documentation in `docs/`, served at /docs/ as HTML pages, as Markdown and as llms.txt."""
