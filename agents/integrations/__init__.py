"""Code hosts and chat services for webhook channels: verify what GitHub, GitLab,
Bitbucket and Slack send, normalize it, and reply through their APIs.

These modules know nothing of routes, sessions or turns; the channel
declarations built on them (`github_channel(...)`, `slack_channel(...)`) and
the host services (`ctx.host.github`) call them. They sit in the lowest layer
so that both can. Every outbound request goes through
`integrations.outbound.OutboundClient` (Slack's official client does its own
HTTP; its base URL is checked by the same guard when the client is built).
"""
