from agents.sdk import define_eval, includes


def reads_a_sent_note(t):
    t.send('/call read {"path": "notes/todo.md"}', workspace_files={"notes/todo.md": "- buy milk\n"})
    t.succeeded()
    t.called_tool("read")
    t.not_called_tool("delete")
    t.check(t.reply, includes("buy milk"))


def starts_from_the_welcome_note(t):
    t.send('/call ls {"path": "notes"}')
    t.succeeded()
    t.called_tool("ls")
    t.check(t.reply, includes("welcome.md"))


cases = define_eval(tags=["smoke"], cases=[
    {"id": "sent-file", "test": reads_a_sent_note},
    {"id": "welcome", "test": starts_from_the_welcome_note},
])
