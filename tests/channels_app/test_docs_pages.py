"""/docs/: every page of docs/ served as HTML with working links, as Markdown, as llms.txt and
llms-full.txt; unknown pages and paths that try to leave docs/ are 404."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from django.test import Client

from channels_app.auth import bearer_auth
from channels_app.docs.pages import ORDER, load_site, site

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Pages another part of the work writes: linked before they exist, skipped by the server while missing.
ARRIVING = {"new-agent", "deployments"}


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag in ("a", "link") and values.get("href"):
            self.hrefs.append(values["href"])


def parsed(html: str) -> Links:
    links = Links()
    links.feed(html)
    return links


@pytest.fixture
def reader() -> Client:
    """Someone the server's auth chain does not admit: the docs need no login."""
    return Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="203.0.113.9")


@pytest.fixture(autouse=True)
def nobody_admitted(settings):
    settings.AGENTSITE_AUTH_POLICIES = [bearer_auth({"a-token-nobody-sends-0123": "alice"})]


def test_every_page_in_docs_is_served_with_its_title():
    names = [p.name for p in site().pages]
    files = sorted(p.stem for p in DOCS.glob("*.md"))
    assert sorted(names) == files
    assert names[: len([n for n in ORDER if n in files])] == [n for n in ORDER if n in files]


def test_each_page_answers_200_for_anyone(reader):
    for page in site().pages:
        response = reader.get(f"/docs/{page.name}")
        assert response.status_code == 200, page.name
        html = response.content.decode()
        assert f"<h1 id=" in html and page.title in html
        assert response["Content-Type"].startswith("text/html")


def test_the_contents_page_lists_every_page(reader):
    response = reader.get("/docs/")
    assert response.status_code == 200
    hrefs = parsed(response.content.decode()).hrefs
    for page in site().pages:
        assert f"/docs/{page.name}" in hrefs
    assert reader.get("/docs").status_code == 302


def test_every_link_on_every_page_resolves(reader):
    """Navigation, contents, cross-page links and their anchors: each answers 200 and each anchor exists."""
    pages = {"/docs/": reader.get("/docs/").content.decode()}
    pages.update({f"/docs/{p.name}": reader.get(f"/docs/{p.name}").content.decode() for p in site().pages})
    checked: dict[str, Links] = {}
    for url, html in pages.items():
        for href in parsed(html).hrefs:
            target = urlsplit(urljoin(f"http://127.0.0.1:8000{url}", href))
            if target.netloc != "127.0.0.1:8000":
                continue  # an outside site (llmstxt.org)
            if target.path.startswith("/docs/") and target.path[len("/docs/"):] in ARRIVING:
                continue
            if not target.path.startswith("/docs") and not target.path.startswith("/static/docs/"):
                continue  # the playground, the API viewer: other tests own them
            if target.path not in checked:
                response = reader.get(target.path)
                assert response.status_code == 200, f"{href} on {url}"
                body = b"".join(response) if response.streaming else response.content  # static files stream
                checked[target.path] = parsed(body.decode())
            if target.fragment:
                assert target.fragment in checked[target.path].ids, f"{href} on {url}: no such anchor"


def test_code_blocks_are_highlighted_from_the_projects_own_css(reader):
    html = reader.get("/docs/http-api").content.decode()
    block = re.search(r'<pre class="highlight" data-runnable="true"><code class="language-bash">(.*?)</code></pre>',
                      html, re.S)
    assert block and '<span class="' in block.group(1)
    css = reader.get("/docs/highlight.css")
    assert css.status_code == 200 and css["Content-Type"].startswith("text/css")
    assert ".highlight .s2" in css.content.decode()
    assert "//" not in "".join(h for h in parsed(html).hrefs if h.endswith(".css"))  # no CDN


def test_a_page_as_markdown_is_its_file(reader):
    response = reader.get("/docs/agents.md")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/markdown")
    assert response.content.decode() == (DOCS / "agents.md").read_text()


def test_an_unknown_page_is_a_404_json_for_programs_and_html_for_browsers(reader):
    response = reader.get("/docs/no-such-page")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    response = reader.get("/docs/no-such-page", HTTP_ACCEPT="text/html,*/*")
    assert response.status_code == 404
    assert "No such page" in response.content.decode()
    assert reader.get("/docs/no-such-page.md").status_code == 404


@pytest.mark.parametrize("path", [
    "/docs/../manage.py", "/docs/..%2Fmanage.py", "/docs/%2e%2e/manage.py", "/docs/..%2F..%2Fetc%2Fpasswd",
    "/docs/..%2FREADME.md", "/docs/.%2E/requirements.txt", "/docs/%2Fetc%2Fpasswd", "/docs/docs/agents.md",
    "/docs/Agents", "/docs/agents.md.md", "/docs/agents%00",
])
def test_no_path_reaches_a_file_outside_the_pages(reader, path):
    response = reader.get(path)
    assert response.status_code in (400, 404), path
    body = response.content.decode()
    for leaked in ("root:x:", "DJANGO_SETTINGS_MODULE", "django>=", "A self-hosted server", "# Agents"):
        assert leaked not in body, path


def test_llms_txt_follows_the_convention(reader):
    response = reader.get("/docs/llms.txt")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    lines = response.content.decode().splitlines()
    assert lines[0] == "# agentsite"
    assert lines[1] == "" and lines[2].startswith("> ") and len(lines[2]) > 60
    sections = [line for line in lines if line.startswith("## ")]
    assert sections[0] == "## Docs"
    assert all(line in ("## Docs", "## Optional") for line in sections)
    links = [line for line in lines if line.startswith("- ")]
    assert len(links) == len(site().pages)
    pattern = re.compile(r"- \[([^\]]+)\]\((http://127\.0\.0\.1:8000/docs/[a-z0-9-]+\.md)\): (\S.*)")
    for line in links:
        match = pattern.fullmatch(line)
        assert match, line
        fetched = reader.get(urlsplit(match.group(2)).path)
        assert fetched.status_code == 200, line
        assert fetched.content.decode().startswith(f"# {match.group(1)}")
    # After the summary and one line of text: only section headings, their links and blank lines.
    assert lines[3] == "" and lines[4] and lines[5] == ""
    assert all(line == "" or line.startswith(("## ", "- ")) for line in lines[5:])


def test_llms_txt_links_are_absolute_from_the_host_the_request_named():
    text = Client(HTTP_HOST="example.com").get("/docs/llms.txt").content.decode()
    assert "](http://example.com/docs/http-api.md)" in text


def test_llms_full_txt_is_every_page(reader):
    response = reader.get("/docs/llms-full.txt")
    assert response.status_code == 200
    text = response.content.decode()
    for page in site().pages:
        assert page.markdown.strip() in text, page.name
    positions = [text.index(page.markdown.strip()) for page in site().pages]
    assert positions == sorted(positions)


def test_pages_come_in_the_fixed_order_then_by_name_and_missing_ones_are_skipped(tmp_path):
    for name in ("zebra", "scale-out", "http-api", "aardvark"):
        (tmp_path / f"{name}.md").write_text(f"# {name.title()}\n\nAbout {name}. More.\n")
    (tmp_path / "Not A Page.md").write_text("# skipped\n")
    (tmp_path / "notes.txt").write_text("not markdown\n")
    pages = load_site(tmp_path).pages
    assert [p.name for p in pages] == ["http-api", "scale-out", "aardvark", "zebra"]
    assert pages[0].title == "Http-Api" and pages[0].summary == "About http-api."


def test_headings_get_githubs_anchors_and_page_links_point_at_served_pages(tmp_path):
    (tmp_path / "one.md").write_text(
        "# One\n\nSee [two](two.md#serve---production), [here](#a-b) and [out](../README.md).\n\n"
        "## A, b\n\n## A, b\n\n### `serve --production`\n")
    page = load_site(tmp_path).get("one")
    assert [h.anchor for h in page.headings] == ["one", "a-b", "a-b-1", "serve---production"]
    assert 'href="two#serve---production"' in page.html and 'href="#a-b"' in page.html
    assert 'href="../README.md"' in page.html  # not a page: left alone (the link test keeps docs/ free of them)
