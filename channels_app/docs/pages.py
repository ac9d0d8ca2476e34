"""The pages of `docs/`: which there are, in what order, and each one rendered to HTML.

A page is a Markdown file named like a URL segment (`http-api.md`). The order is
`ORDER`, then any other page by name; a name in `ORDER` with no file is skipped,
since some pages arrive with other work. Pages are read and rendered once per
process (`site`): the docs change with the code, and the code is not reloaded either.
"""
from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.rules_core import StateCore

ORDER = (
    "new-agent", "http-api", "agents", "handoff", "models", "tools-and-approvals", "schedules-and-reminders",
    "messaging",
    "runtimes-and-workspaces", "claude-agent-sdk", "builtin-tools", "mcp", "serving-mcp", "serving-a2a", "channels-and-providers", "slack-socket-mode", "secrets-and-connections", "deployments",
    "console-agents",
    "evals",
    "running-for-a-team", "backups-and-upgrades",
    "observability", "costs-and-budgets", "experiments", "scale-out",
)
# The only names a page may have: no dots, no slashes, so no URL can name a file outside docs/.
NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
PROJECT = "agentsite"
SUMMARY = ("A self-hosted server for AI agents, in Python on Django. You write an agent as a folder "
           "(instructions and typed tools), agentsite serves it over an HTTP API, runs every turn on "
           "background workers, and records each conversation as a session with an append-only event "
           "log you can replay and follow live.")


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    anchor: str


@dataclass(frozen=True)
class Page:
    name: str
    title: str
    summary: str      # the first sentence of the page's first paragraph, on one line
    summary_html: str
    markdown: str
    html: str
    headings: tuple[Heading, ...] = field(default=())

    @property
    def listed_first(self) -> bool:
        """One of the pages in `ORDER` (llms.txt lists the others as optional)."""
        return self.name in ORDER


@dataclass(frozen=True)
class Site:
    pages: tuple[Page, ...]

    def get(self, name: str) -> Page | None:
        return next((p for p in self.pages if p.name == name), None)


def slug(text: str) -> str:
    """A heading's anchor as GitHub makes it: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def heading_anchors(state: StateCore) -> None:
    """Give each heading an `id` (its slug, `-1`, `-2`... when repeated) and note it in env["headings"]."""
    seen: dict[str, int] = {}
    headings: list[Heading] = []
    tokens = state.tokens
    for index, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        inline = tokens[index + 1]
        text = "".join(c.content for c in inline.children or () if c.type in ("text", "code_inline"))
        anchor = slug(text)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        if count:
            anchor = f"{anchor}-{count}"
        token.attrSet("id", anchor)
        headings.append(Heading(int(token.tag[1]), text, anchor))
    state.env["headings"] = headings


def page_links(state: StateCore) -> None:
    """`other-page.md#anchor` (how pages link on the repository's web view) becomes `other-page#anchor`,
    the served page's URL, relative to /docs/."""
    for token in state.tokens:
        for child in token.children or ():
            if child.type != "link_open":
                continue
            href = str(child.attrGet("href") or "")
            path, hash_, anchor = href.partition("#")
            if path.endswith(".md") and NAME.fullmatch(path[:-3]):
                child.attrSet("href", path[:-3] + hash_ + anchor)


def highlight(code: str, language: str, attrs: str) -> str:
    """A fenced block as Pygments' HTML (classes only: the colours are /docs/highlight.css)."""
    try:
        lexer = get_lexer_by_name(language) if language else None
    except ClassNotFound:
        lexer = None
    body = pygments_highlight(code, lexer, HtmlFormatter(nowrap=True)) if lexer else html.escape(code)
    runs = ' data-runnable="true"' if attrs.split()[:1] == ["runnable"] else ""
    return f'<pre class="highlight"{runs}><code class="language-{html.escape(language)}">{body}</code></pre>'


def markdown(served: bool = True) -> MarkdownIt:
    """The parser of the pages; `served=False` leaves links as written (to check them against the files)."""
    # Imported where the pages are first rendered, not by every process that loads the URL conf.
    from markdown_it import MarkdownIt

    # CommonMark and tables; raw HTML off, so a page shows what its Markdown says and nothing more.
    md = MarkdownIt("commonmark", {"html": False, "highlight": highlight}).enable("table")
    md.core.ruler.push("heading_anchors", heading_anchors)
    if served:
        md.core.ruler.push("page_links", page_links)
    return md


def first_sentence(text: str) -> str:
    one_line = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", one_line)
    return match.group(1) if match else one_line


def read_page(path: Path, md: MarkdownIt) -> Page:
    text = path.read_text(encoding="utf-8")
    env: dict = {}
    tokens = md.parse(text, env)
    title, summary = path.stem, ""
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag == "h1" and title == path.stem:
            title = tokens[index + 1].content
        elif token.type == "paragraph_open" and not summary:
            summary = first_sentence(tokens[index + 1].content)
    return Page(name=path.stem, title=title, summary=summary, summary_html=md.renderInline(summary), markdown=text,
                html=md.renderer.render(tokens, md.options, env), headings=tuple(env["headings"]))


def page_files(folder: Path) -> list[Path]:
    """The pages' files in their order: `ORDER`'s that exist, then the others by name."""
    found = {p.stem: p for p in folder.glob("*.md") if NAME.fullmatch(p.stem) and p.is_file()}
    return [found[name] for name in ORDER if name in found] + [
        found[name] for name in sorted(found) if name not in ORDER]


@functools.lru_cache(maxsize=4)
def load_site(folder: Path) -> Site:
    md = markdown()
    return Site(pages=tuple(read_page(path, md) for path in page_files(folder)))


def site() -> Site:
    from django.conf import settings

    return load_site(Path(settings.BASE_DIR) / "docs")


def llms_txt(pages: tuple[Page, ...], url_of) -> str:
    """The llms.txt index (llmstxt.org): an H1, a summary in a blockquote, then sections of links,
    one a line; `url_of(page)` is where a page's Markdown is."""
    def links(selected: list[Page]) -> str:
        return "".join(f"- [{p.title}]({url_of(p)}): {p.summary}\n" for p in selected)

    main = [p for p in pages if p.listed_first]
    other = [p for p in pages if not p.listed_first]
    text = f"# {PROJECT}\n\n> {SUMMARY}\n\nEach link is a page of its documentation as Markdown; `llms-full.txt` beside this file is every page in one text.\n"
    if main:
        text += "\n## Docs\n\n" + links(main)
    if other:
        text += "\n## Optional\n\n" + links(other)
    return text


def llms_full_txt(pages: tuple[Page, ...]) -> str:
    return "\n\n".join(p.markdown.strip("\n") for p in pages) + "\n"
