"""agentsite as if on several hosts, on one machine: for the tests (tests/hosts/) and for benchmarks.

`Topology` starts two web processes (uvicorn, as `serve --server uvicorn` runs
it) and two worker processes (`manage.py qcluster`), each with its own state
root (a folder the others never read) and its own AGENTSITE_HOST_ID (web-a,
web-b, worker-a, worker-b), all on one PostgreSQL database and one Redis, and
Debian's nginx in front of the two web processes with deploy/nginx-hosts.conf
(its ports substituted). Every process is a real child process in a process
group of its own, so a test can SIGKILL a "host" (the qcluster sentinel with
its forked workers); each writes its log to a file (`Topology.logs()`).

The database and Redis are either the machine's (a throwaway database on
127.0.0.1:5432, a free Redis db number) or private ones a test may restart:
`PrivatePostgres` (initdb in a temp folder, its own port) and `PrivateRedis`
(redis-server on its own port). Nothing here needs pytest: bench/ scripts
import it as `hostslib` (with bench/ on sys.path), tests as `bench.hostslib`.
"""
from .services import (ROOT, PrivatePostgres, PrivateRedis, TopologyError, free_port, redis_database,
                       throwaway_database, wait_until)
from .topology import Proc, Topology, rendered_site, token_hash, topology

__all__ = ["ROOT", "PrivatePostgres", "PrivateRedis", "Proc", "Topology", "TopologyError", "free_port",
           "redis_database", "rendered_site", "throwaway_database", "token_hash", "topology", "wait_until"]
