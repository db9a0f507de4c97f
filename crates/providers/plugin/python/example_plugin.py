#!/usr/bin/env python3
"""An example flotilla provider plugin in Python (grpcio), to show that any language works.

It speaks hashicorp go-plugin's process protocol as flotilla's host expects it (magic
cookie, one handshake line on stdout, the health service "plugin", GRPCController.Shutdown,
GRPCStdio) around flotilla's own InstanceGroup service, whose .proto files it compiles at
start with grpc_tools from crates/plugin-protocol/proto (or FLOTILLA_PLUGIN_PROTO_DIR).

Its `config` (plugin_config.config, sent in Init) picks the group:
  {"provider": "local"}     this host as the only instance, reached by the local connector
  {"provider": "memory", "instances": N, "state_file": "..."}
                            N running instances in memory (and in state_file, so that a
                            restarted plugin lists the same ones)
  "say": "..."              printed on stdout and stderr at Init (the stdio tests)

Needs grpcio and grpcio-tools (Debian: python3-grpcio, python3-grpc-tools).
"""

import json
import os
import platform
import sys
import tempfile
import threading
import time
from concurrent import futures

COOKIE_KEY = "FLOTILLA_PLUGIN_MAGIC_COOKIE"
COOKIE_VALUE = "7c4b1e9a-instance-group-d2f05c83"
APP_VERSION = 1

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.environ.get(
    "FLOTILLA_PLUGIN_PROTO_DIR",
    os.path.join(HERE, "..", "..", "..", "plugin-protocol", "proto"),
)
PROTOS = [
    "flotilla/instance_group.proto",
    "go_plugin/grpc_controller.proto",
    "go_plugin/grpc_stdio.proto",
    "grpc/health/v1/health.proto",
]


def compile_protos():
    """Generates the Python modules into a fresh directory and imports them."""
    import grpc_tools
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="flotilla-plugin-py")
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    # Each file's own directory is an include root, so that the modules are flat
    # (`health_pb2`, not `grpc.health.v1.health_pb2`, which would hide grpcio itself).
    files = [os.path.join(PROTO_DIR, p) for p in PROTOS]
    roots = sorted({os.path.dirname(f) for f in files})
    args = (["protoc"] + ["-I" + r for r in roots] + ["-I" + well_known,
            "--python_out=" + out, "--grpc_python_out=" + out] + files)
    if protoc.main(args) != 0:
        raise SystemExit("compiling the protocol's .proto files failed")
    sys.path.insert(0, out)


def main():
    if os.environ.get(COOKIE_KEY) != COOKIE_VALUE:
        print("This binary is a plugin. These are not meant to be executed directly. "
              "Please execute the program that consumes these plugins, which will load "
              "any plugins automatically", file=sys.stderr)
        return 1
    offered = [v.strip() for v in os.environ.get("PLUGIN_PROTOCOL_VERSIONS", "1").split(",")]
    if str(APP_VERSION) not in offered:
        print("the host offers protocol versions %s; this plugin speaks %d"
              % (offered, APP_VERSION), file=sys.stderr)
        return 1
    if os.environ.get("PLUGIN_CLIENT_CERT"):
        # AutoMTLS is optional on the plugin's side: without a certificate in the handshake
        # line the host speaks plain text (and says so).
        print("AutoMTLS is not implemented by this example", file=sys.stderr)
    watch_parent()
    compile_protos()

    import grpc
    import grpc_controller_pb2  # noqa: F401  (imported for its messages)
    import grpc_controller_pb2_grpc
    import grpc_stdio_pb2
    import grpc_stdio_pb2_grpc
    import health_pb2
    import health_pb2_grpc
    import instance_group_pb2 as pb
    import instance_group_pb2_grpc

    stopped = threading.Event()

    class Health(health_pb2_grpc.HealthServicer):
        def Check(self, request, context):
            if request.service in ("", "plugin"):
                return health_pb2.HealthCheckResponse(
                    status=health_pb2.HealthCheckResponse.SERVING)
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")

    class Controller(grpc_controller_pb2_grpc.GRPCControllerServicer):
        def Shutdown(self, request, context):
            stopped.set()
            return grpc_controller_pb2.Empty()

    chunks = []
    chunks_cv = threading.Condition()

    class Stdio(grpc_stdio_pb2_grpc.GRPCStdioServicer):
        def StreamStdio(self, request, context):
            while not stopped.is_set() and context.is_active():
                with chunks_cv:
                    chunks_cv.wait_for(lambda: chunks or stopped.is_set(), timeout=0.5)
                    pending, chunks[:] = list(chunks), []
                for channel, data in pending:
                    yield grpc_stdio_pb2.StdioData(channel=channel, data=data)

    group = {"impl": None}

    def need(context):
        if group["impl"] is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "provider not initialised")
        return group["impl"]

    class InstanceGroup(instance_group_pb2_grpc.InstanceGroupServicer):
        def Init(self, request, context):
            config = json.loads(request.config_json or "{}")
            if "say" in config:
                print("stdout: %s" % config["say"], flush=True)
                print("stderr: %s" % config["say"], file=sys.stderr, flush=True)
            kind = config.get("provider", "memory")
            if kind == "local":
                impl = LocalGroup(pb, request)
            elif kind == "memory":
                impl = MemoryGroup(pb, request, config)
            else:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              "provider %r: this example serves \"local\" or \"memory\"" % kind)
            group["impl"] = impl
            return pb.InitResponse(info=impl.info())

        def Update(self, request, context):
            return pb.UpdateResponse(instances=need(context).listing())

        def Increase(self, request, context):
            return pb.IncreaseResponse(requested=need(context).increase(request.n))

        def Decrease(self, request, context):
            return pb.DecreaseResponse(ids=need(context).decrease(list(request.ids)))

        def ConnectInfo(self, request, context):
            info = need(context).connect_info(request.id)
            if info is None:
                context.abort(grpc.StatusCode.NOT_FOUND, request.id)
            return info

        def Heartbeat(self, request, context):
            if not need(context).has(request.id):
                context.abort(grpc.StatusCode.NOT_FOUND, request.id)
            return pb.HeartbeatResponse()

        def Shutdown(self, request, context):
            return pb.ShutdownResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
    grpc_controller_pb2_grpc.add_GRPCControllerServicer_to_server(Controller(), server)
    grpc_stdio_pb2_grpc.add_GRPCStdioServicer_to_server(Stdio(), server)
    instance_group_pb2_grpc.add_InstanceGroupServicer_to_server(InstanceGroup(), server)

    socket_dir = os.environ.get("PLUGIN_UNIX_SOCKET_DIR") or tempfile.gettempdir()
    path = os.path.join(socket_dir, "plugin-py-%d.sock" % os.getpid())
    server.add_insecure_port("unix:" + path)
    server.start()

    sys.stdout.write("1|%d|unix|%s|grpc|\n" % (APP_VERSION, path))
    sys.stdout.flush()
    redirect_stdio(grpc_stdio_pb2.StdioData, chunks, chunks_cv)

    stopped.wait()
    server.stop(grace=1).wait()
    try:
        os.unlink(path)
    except OSError:
        pass
    return 0


def redirect_stdio(StdioData, chunks, cv):
    """Replaces fds 1 and 2 by pipes whose data goes out on GRPCStdio, as go-plugin does."""
    for fd, channel in ((1, StdioData.STDOUT), (2, StdioData.STDERR)):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)

        def pump(r=r, channel=channel):
            while True:
                data = os.read(r, 32768)
                if not data:
                    return
                with cv:
                    chunks.append((channel, data))
                    cv.notify_all()

        threading.Thread(target=pump, daemon=True).start()


def watch_parent():
    """Exits when flotilla is gone: its lifeline (stdin) closes, or the parent changes."""
    parent = os.getppid()
    if os.environ.get("FLOTILLA_PLUGIN_LIFELINE") == "stdin":
        def lifeline():
            while os.read(0, 256):
                pass
            os._exit(3)
        threading.Thread(target=lifeline, daemon=True).start()

    def poll():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(3)
    threading.Thread(target=poll, daemon=True).start()


def go_arch():
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "i686": "386"}.get(machine, machine)


class LocalGroup:
    """This host as the group's only, always running, instance."""

    def __init__(self, pb, request):
        self.pb = pb
        self.connector = request.connector

    def info(self):
        pb = self.pb
        return pb.ProviderInfo(
            id="python-local", max_size=1, version="1", build_info="example_plugin.py",
            capabilities=pb.Capabilities(single_host=True, adopts_preexisting=True,
                                         connector=pb.CONNECTOR_KIND_LOCAL))

    def listing(self):
        return [self.pb.Instance(id="local", state=self.pb.STATE_RUNNING)]

    def increase(self, n):
        return 0

    def decrease(self, ids):
        return []

    def has(self, id):
        return id == "local"

    def connect_info(self, id):
        if id != "local":
            return None
        config = self.pb.ConnectorConfig()
        config.CopyFrom(self.connector)
        config.os = "linux" if sys.platform.startswith("linux") else sys.platform
        config.arch = go_arch()
        return self.pb.ConnectInfoResponse(config=config, id="local", internal_addr="localhost")


class MemoryGroup:
    """Running instances that exist only in memory (and in a state file)."""

    def __init__(self, pb, request, config):
        self.pb = pb
        self.name = request.runner_name
        self.state_file = config.get("state_file")
        self.lock = threading.Lock()
        saved = None
        if self.state_file and os.path.exists(self.state_file):
            with open(self.state_file) as f:
                saved = json.load(f)
        if saved:
            self.next, self.ids = saved["next"], set(saved["ids"])
        else:
            n = int(config.get("instances", 0))
            self.next, self.ids = n, {"m-%d" % i for i in range(n)}
        self.save()

    def save(self):
        if not self.state_file:
            return
        tmp = self.state_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"next": self.next, "ids": sorted(self.ids)}, f)
        os.replace(tmp, self.state_file)

    def info(self):
        return self.pb.ProviderInfo(id="memory/" + self.name, max_size=0, version="1",
                                    build_info="example_plugin.py")

    def listing(self):
        with self.lock:
            return [self.pb.Instance(id=i, state=self.pb.STATE_RUNNING) for i in sorted(self.ids)]

    def increase(self, n):
        with self.lock:
            for _ in range(n):
                self.ids.add("m-%d" % self.next)
                self.next += 1
            self.save()
        return n

    def decrease(self, ids):
        with self.lock:
            done = [i for i in ids if i in self.ids]
            self.ids.difference_update(done)
            self.save()
        return done

    def has(self, id):
        with self.lock:
            return id in self.ids

    def connect_info(self, id):
        if not self.has(id):
            return None
        return self.pb.ConnectInfoResponse(
            config=self.pb.ConnectorConfig(os="linux", arch="amd64", username="ci"),
            id=id, internal_addr="192.0.2.1:22")


if __name__ == "__main__":
    sys.exit(main())
