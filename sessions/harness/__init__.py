"""Built-in tools an agent opts into with `Agent(builtins=[...])`, the ones every team would otherwise
write for itself: `web_fetch`, `web_search` and `todos` (a plan), offered under those names on every
model and every runtime.

- `fetch`: `web_fetch`, through the egress door (`ctx.host.http`);
- `search`: `web_search`, through the backend the operator configures (AGENTSITE_SEARCH_BACKEND);
- `todos`: `update_todos` and `read_todos`, the plan kept in the session's log (`todos.updated`);
- `tools`: the tools each declared name brings, registered as the `builtins` feature's built-ins
  (sessions.turn.extensions), so /info and the runners see them as any other built-in.
"""
