from django.urls import path, re_path

from channels_app.docs import views

# Page names are URL segments without dots or slashes (pages.NAME): `..` cannot reach a file.
urlpatterns = [
    path("", views.index, name="docs"),
    path("llms.txt", views.llms, name="docs-llms"),
    path("llms-full.txt", views.llms_full, name="docs-llms-full"),
    path("highlight.css", views.highlight_css, name="docs-highlight-css"),
    re_path(r"^(?P<name>[a-z0-9][a-z0-9-]*)\.md$", views.page_markdown, name="docs-markdown"),
    re_path(r"^(?P<name>[a-z0-9][a-z0-9-]*)$", views.page, name="docs-page"),
    re_path(r"^(?P<rest>.*)$", views.not_found),
]
