"""/docs/: the pages of docs/ as HTML, as Markdown, and as llms.txt and llms-full.txt.

Public like /healthz: the docs hold no secrets, and a person or a program
reading them may not have an account yet. Nothing here opens a path from the
URL: a page is looked up by name among the pages found in docs/.
"""
from __future__ import annotations

import functools

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe
from pygments.formatters import HtmlFormatter

from channels_app.docs.pages import PROJECT, Page, llms_full_txt, llms_txt, site
from channels_app.errors import error_response

MARKDOWN = "text/markdown; charset=utf-8"
# An hour: pages change only with a new release of the server, and a stale page for an hour is harmless.
CACHE = "public, max-age=3600"


def _cached(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = CACHE
    return response


def _context(current: Page | None) -> dict:
    return {"project": PROJECT, "pages": site().pages, "current": current}


@require_safe
def index(request: HttpRequest) -> HttpResponse:
    return _cached(render(request, "docs/index.html", _context(None)))


@require_safe
def page(request: HttpRequest, name: str) -> HttpResponse:
    found = site().get(name)
    if found is None:
        return not_found(request)
    toc = [h for h in found.headings if h.level == 2]
    return _cached(render(request, "docs/page.html", {**_context(found), "page": found, "toc": toc}))


@require_safe
def page_markdown(request: HttpRequest, name: str) -> HttpResponse:
    found = site().get(name)
    if found is None:
        return not_found(request)
    return _cached(HttpResponse(found.markdown, content_type=MARKDOWN))


@require_safe
def llms(request: HttpRequest) -> HttpResponse:
    # Absolute links, from the host the request named (behind a trusted proxy: the public one),
    # so the file means the same wherever a program stores it.
    text = llms_txt(site().pages, lambda p: request.build_absolute_uri(f"/docs/{p.name}.md"))
    return _cached(HttpResponse(text, content_type="text/plain; charset=utf-8"))


@require_safe
def llms_full(request: HttpRequest) -> HttpResponse:
    return _cached(HttpResponse(llms_full_txt(site().pages), content_type="text/plain; charset=utf-8"))


@functools.cache
def _highlight_css() -> str:
    return HtmlFormatter(style="default").get_style_defs(".highlight")


@require_safe
def highlight_css(request: HttpRequest) -> HttpResponse:
    return _cached(HttpResponse(_highlight_css(), content_type="text/css; charset=utf-8"))


def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    """A person's browser gets a page with the contents; a program gets the JSON error every route gives."""
    if "text/html" in request.headers.get("Accept", ""):
        return render(request, "docs/missing.html", _context(None), status=404)
    return error_response(404, "not_found", f"no docs page at {request.path}")
