"""Provider layer for webhook channels: verify what GitHub, GitLab, Bitbucket
and Slack send, normalize it, and reply through their APIs.

These modules know nothing of routes, sessions or turns; the channel
framework calls them. Every outbound request goes through
`providers.outbound.OutboundClient` (Slack's official client does its own
HTTP; its base URL is checked by the same guard when the client is built).
"""
