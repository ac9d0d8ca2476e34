"""Code hosts and chat services for webhook channels: verify what GitHub, GitLab,
Bitbucket and Slack send, normalize it, and reply through their APIs.

One folder per service (`github/`, `gitlab/`, `bitbucket/`, `slack/`), each with
its protocol (signatures, parsing), its client and its channel builder. Shared
here: `events` (`RepoEvent` and the webhook errors), `signatures`, `config`
(variable names, never secrets), `outbound` (the SSRF-guarded client every
outbound request goes through; Slack's official client does its own HTTP, its
base URL checked by the same guard when the client is built), and the channel
the code hosts share: `repo_channels` (the webhook route, `run_task`) and
`repo_replies` (its events map).

The protocols and clients know nothing of routes, sessions or turns; the channel
declarations built on them and the host services (`ctx.host.github`) call them.
They sit in the lowest layer so that both can.
"""
