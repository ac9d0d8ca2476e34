from agents.sdk import define_eval, includes


def finds_payments_degraded(t):
    t.send('Is payments healthy?\n/call check_service {"service": "payments"}')
    t.succeeded()
    t.called_tool("check_service")
    t.not_called_tool("write_incident_report")
    t.check(t.reply, includes("degraded"))


def refuses_an_unknown_service(t):
    t.send('/call check_service {"service": "mail"}')
    t.succeeded()
    t.called_tool("check_service")
    t.check(t.reply, includes("check_service (error)"))


cases = define_eval(tags=["smoke"], cases=[
    {"id": "payments", "test": finds_payments_degraded},
    {"id": "unknown-service", "test": refuses_an_unknown_service},
])
