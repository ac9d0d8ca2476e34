"""agents.serving.free_port: the port a server about to start is given."""
import socket

from agents.serving import LOWEST_PORT, _ephemeral_low, free_port


def test_a_free_port_is_outside_the_range_outgoing_connections_take():
    # A port from the kernel's ephemeral range can be taken by any client connection opened between
    # choosing it and the server binding it (seen: "port … is already in use" from a starting serve).
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST_PORT <= port < _ephemeral_low() for port in ports)
    assert len(ports) > 1  # chosen at random, so concurrent callers rarely meet


def test_a_free_port_can_be_listened_on_and_a_taken_one_is_not_given():
    port = free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert port not in {free_port() for _ in range(200)}
