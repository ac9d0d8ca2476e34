"""The built-in HTTP channel: JSON routes under /<slug>/v1/, one module per resource.

Views translate HTTP into arguments and call one function of the sessions
app; bodies are validated by `channels_app.bodies`, answered with the models
of `channels_app.replies` (a module per resource), and documented from both (`channels_app.schema`).
The streaming route lives in `channels_app.stream` (it is async).
"""
