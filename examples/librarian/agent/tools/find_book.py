from pydantic import BaseModel, Field

from agents.sdk import tool

BOOKS = {
    "dune": {"title": "Dune", "author": "Frank Herbert", "shelf": "SF-3", "onLoan": False},
    "middlemarch": {"title": "Middlemarch", "author": "George Eliot", "shelf": "FIC-12", "onLoan": True},
    "the hobbit": {"title": "The Hobbit", "author": "J. R. R. Tolkien", "shelf": "FAN-1", "onLoan": False},
}


class Input(BaseModel):
    title: str = Field(description="The book's title", examples=["Dune"])


@tool(description="Look a book up by title: its author, its shelf and whether it is on loan.", effect="read")
def find_book(input: Input, ctx) -> dict:
    book = BOOKS.get(input.title.strip().lower())
    if book is None:
        raise LookupError(f"the library has no book titled {input.title!r}")
    return book
