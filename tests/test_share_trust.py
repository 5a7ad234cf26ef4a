"""l3codec.share against hostile and failing peers, with real processes: a peer (of this user or,
run as root, of `nobody`) cannot make either end run code; a silent, garbled or oversized peer
is dropped without stalling the real consumers; a killed or terminated producer raises L3Error
within seconds; a stopped consumer stalls the others at most peer_timeout; the socket lives in
a directory only its owner can write. Every wait is bounded, so a hang fails the test."""

import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

torch = pytest.importorskip("torch")
from l3codec.format import L3Error
from l3codec.share import BatchServer, SharedLoader

pytestmark = pytest.mark.processes

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="running a peer as another user (nobody) needs root")

# a producer over a stand-in loader (no dataset, no decoder): options["batches"] per epoch
SERVER = textwrap.dedent("""
    import json, sys, time, torch
    from l3codec.share import BatchServer
    path, options = sys.argv[1], json.loads(sys.argv[2])

    class Counting:
        def set_epoch(self, epoch):
            self.epoch = epoch

        def __iter__(self):
            for n in range(options.get("batches", 4)):
                time.sleep(options.get("pause", 0))
                yield {"image": torch.full((2, 3, 4, 4), n % 256, dtype=torch.uint8),
                       "key": [f"{self.epoch}-{n}-{i}" for i in range(2)], "index": torch.tensor([n, n])}

    server = BatchServer(Counting(), path, **options.get("server", {}))
    server.run(epochs=options.get("epochs", 1))
""")

# stdlib only, so that `nobody` can run it: connects, sends a pickle that would run `id -u`
PICKLING_CONSUMER = textwrap.dedent("""
    import os, pickle, socket, struct, sys
    path, marker = sys.argv[1:3]

    class Run:
        def __reduce__(self):
            return (os.system, (f"id -u > {marker}",))

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    payload = pickle.dumps(Run())
    try:
        sock.sendall(struct.pack("<Q", len(payload)) + payload)
        while sock.recv(4096):
            pass
    except OSError:
        pass
""")

PICKLING_PRODUCER = textwrap.dedent("""
    import os, pickle, socket, struct, sys
    path, marker = sys.argv[1:3]

    class Run:
        def __reduce__(self):
            return (os.system, (f"id -u > {marker}",))

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen(4)
    listener.settimeout(30)
    sock, _ = listener.accept()
    payload = pickle.dumps(Run())
    for _ in range(3):
        try:
            sock.sendall(struct.pack("<Q", len(payload)) + payload)
        except OSError:
            break
    sock.settimeout(10)
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass
""")


def frame(message) -> bytes:
    """A message in share's wire format (header, then JSON)."""
    body = json.dumps(message).encode()
    return struct.pack("<4sI", b"L3S1", len(body)) + body


@pytest.fixture
def shared_dir():
    """A directory under the system tempdir that `nobody` may enter (pytest's tmp_path is 0700)."""
    base = tempfile.mkdtemp(prefix="l3-share-trust-")
    os.chmod(base, 0o711)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def start_server(path, options, **popen):
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(path), json.dumps(options)], **popen)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        assert server.poll() is None, "the server exited"
        assert time.monotonic() < deadline, "the server's socket never appeared"
        time.sleep(0.02)
    return server


def within(seconds, work):
    """work()'s result, or a failure when it takes longer than seconds (it may hang on old code)."""
    result = {}

    def run():
        try:
            result["value"] = work()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    if "error" in result:
        raise result["error"]
    return result["value"]


def keys_of(path, **options):
    def take():
        with SharedLoader(path, **options) as shared:
            return [batch["key"] for batch in shared]
    return take


def stop(process):
    if process.poll() is None:
        process.kill()
        process.wait(10)


def as_user(uid):
    """Popen arguments that run the child as uid (its group the same number, no others)."""
    return {"user": uid, "group": uid, "extra_groups": []}


# -- item 1: no code execution across users ---------------------------------------------------
@pytest.mark.parametrize("user", ["same", pytest.param("nobody", marks=as_root)])
def test_a_fake_producer_cannot_make_the_consumer_run_code(shared_dir, user):
    directory = os.path.join(shared_dir, "squatted")
    os.mkdir(directory, 0o755)
    uid = os.geteuid() if user == "same" else NOBODY
    os.chown(directory, uid, uid)
    path, marker = os.path.join(directory, "share.sock"), os.path.join(shared_dir, "ran")
    open(marker, "w").close()
    os.chmod(marker, 0o666)
    os.truncate(marker, 0)
    producer = subprocess.Popen(["/usr/bin/python3" if user == "nobody" else sys.executable, "-c",
                                 PICKLING_PRODUCER, path, marker], **(as_user(uid) if user == "nobody" else {}))
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(path):
            assert producer.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        named = rf"BatchServer at {path} \(pid {producer.pid}, .*\)"  # which socket and process sent it
        with pytest.raises(L3Error, match=f"{named} runs as another user" if user == "nobody"
                           else f"{named}: not an l3codec.share message"):
            within(20, keys_of(path, connect_timeout=10))
    finally:
        stop(producer)
    with open(marker) as ran:
        assert ran.read() == "", "the consumer ran the producer's pickle"


@pytest.mark.parametrize("user", ["same", pytest.param("nobody", marks=as_root)])
def test_a_fake_consumer_cannot_make_the_producer_run_code_and_the_real_one_is_served(shared_dir, user, capfd):
    directory = os.path.join(shared_dir, "served")
    os.mkdir(directory, 0o755)
    path, marker = os.path.join(directory, "share.sock"), os.path.join(shared_dir, "ran")
    open(marker, "w").close()
    os.chmod(marker, 0o666)
    server = start_server(path, {"batches": 3, "server": {"min_consumers": 1}}, stderr=subprocess.PIPE, text=True)
    try:
        os.chmod(path, 0o777)  # as if it were open to everyone: the peer's uid must still be checked
        fake = subprocess.run(["/usr/bin/python3" if user == "nobody" else sys.executable, "-c", PICKLING_CONSUMER,
                               path, marker], check=False, timeout=30, **(as_user(NOBODY) if user == "nobody" else {}))
        assert fake.returncode == 0
        assert within(30, keys_of(path, connect_timeout=10)) == [[f"0-{n}-0", f"0-{n}-1"] for n in range(3)]
        assert server.wait(30) == 0
    finally:
        stop(server)
    with open(marker) as ran:
        assert ran.read() == "", "the producer ran the consumer's pickle"
    expected = "its user is not allowed" if user == "nobody" else "not an l3codec.share message"
    assert expected in server.stderr.read()


# -- items 2 and 3: bad peers are dropped, bounded, and stall nobody ----------------------------
def test_silent_garbled_and_malformed_peers_are_dropped_and_the_real_consumers_are_served(tmp_path):
    path = str(tmp_path / "share.sock")
    server = start_server(path, {"batches": 3, "epochs": 1000, "server": {"min_consumers": 2}}, stderr=subprocess.PIPE,
                          text=True)  # after epoch 0 it waits for a consumer: the silent peer's drop is logged
    peers = []
    try:
        def connect(data):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(15)
            sock.connect(path)
            sock.sendall(data)
            peers.append(sock)
            return sock

        connect(os.urandom(64))  # garbage
        connect(frame([1, 2, 3]))  # not an object
        connect(frame({"join": "later"}))  # an unknown join point
        connect(struct.pack("<4sI", b"L3S1", 4000) + b"[" * 4000)  # nested too deep for json
        acking = connect(frame({"join": "epoch"}))
        assert acking.recv(4096)  # welcomed: a consumer now
        acking.sendall(frame({"ack": "x"}))  # a malformed ack
        start = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            takes = [pool.submit(keys_of(path, connect_timeout=10)) for _ in range(2)]
            for take in takes:
                assert take.result(timeout=20) == [[f"0-{n}-0", f"0-{n}-1"] for n in range(3)]
        served = time.monotonic() - start
        for sock in peers:  # each one told why and closed by the producer, none left hanging
            received = b""
            try:
                while chunk := sock.recv(4096):
                    received += chunk
            except ConnectionResetError:  # closed with what it sent unread
                pass
            assert b'"dropped":' in received, received
    finally:
        stop(server)
    log = server.stderr.read()
    assert log.count("dropped connection from pid") + log.count("dropped consumer pid") == 5, log
    assert served < 4.5, f"served after {served:.1f} s"


def test_a_silent_peer_is_dropped_after_the_hello_timeout_and_stalls_nobody(tmp_path):
    path = str(tmp_path / "share.sock")
    # many epochs: after the consumer leaves, the producer waits for the next one instead of
    # finishing its run (which closes every connection, the silent one too, before 5 s)
    server = start_server(path, {"batches": 3, "epochs": 1000}, stderr=subprocess.PIPE, text=True)
    try:
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.settimeout(15)
        silent.connect(path)  # and says nothing
        start = time.monotonic()
        assert within(20, keys_of(path, connect_timeout=10)) == [[f"0-{n}-0", f"0-{n}-1"] for n in range(3)]
        served = time.monotonic() - start
        received = b""
        while chunk := silent.recv(4096):
            received += chunk
        dropped = time.monotonic() - start
    finally:
        stop(server)
    assert served < 4.5, f"served after {served:.1f} s: the silent peer (dropped at 5 s) held it up"
    assert b'"dropped":"no hello within 5 s"' in received and 4.5 < dropped < 8, (received, dropped)
    assert "dropped connection from pid" in server.stderr.read()


def vm_peak_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


@pytest.mark.parametrize("claim", [struct.pack("<Q", 1 << 40), struct.pack("<4sI", b"L3S1", (1 << 32) - 1)],
                         ids=["2^40, old framing", "4 GiB, this framing"])
def test_a_huge_claimed_length_is_refused_before_reading(tmp_path, claim):
    path = str(tmp_path / "share.sock")
    server = start_server(path, {"batches": 2, "server": {"min_consumers": 1}}, stderr=subprocess.PIPE, text=True)
    try:
        before = vm_peak_mb(server.pid)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(path)
        junk = os.urandom(1 << 20)
        start, closed = time.monotonic(), False
        try:
            sock.sendall(claim)
            for _ in range(64):  # 64 MB of junk after the claim, unless the producer hangs up first
                sock.sendall(junk)
            closed = sock.recv(4096) == b"" or sock.recv(4096) == b""
        except OSError:
            closed = True
        assert closed, "the producer kept reading"
        assert time.monotonic() - start < 5
        grown = vm_peak_mb(server.pid) - before
        assert grown < 32, f"the producer's peak memory grew {grown:.0f} MB"
        assert within(20, keys_of(path, connect_timeout=10)) == [[f"0-{n}-0", f"0-{n}-1"] for n in range(2)]
        assert server.wait(30) == 0
    finally:
        stop(server)


def test_a_published_batch_is_sealed_so_no_consumer_can_change_it_for_the_others():
    from l3codec.share import _publish, _take
    fd, fields = _publish({"image": torch.arange(64, dtype=torch.uint8).reshape(1, 1, 8, 8)}, "sealed")
    try:
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"x", 0)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        assert torch.equal(_take(fields, fd)["image"].reshape(-1), torch.arange(64, dtype=torch.uint8))
    finally:
        os.close(fd)
    unsealed = os.memfd_create("unsealed")
    try:
        os.write(unsealed, bytes(64))
        with pytest.raises(L3Error, match="not sealed"):
            _take(fields, unsealed)
    finally:
        os.close(unsealed)


# -- item 4: a dead producer raises, and leaves nothing behind -----------------------------------
def shm_names():
    return {name for name in os.listdir("/dev/shm") if name.startswith(("psm_", "l3share"))}


@pytest.mark.parametrize("kill", ["process", "process group"])
def test_a_killed_producer_raises_l3error_within_seconds_and_leaves_no_segments(tmp_path, kill):
    path = str(tmp_path / "share.sock")
    before = shm_names()
    server = start_server(path, {"batches": 1000, "epochs": 100, "pause": 0.01, "server": {"slots": 3}},
                          start_new_session=True)
    try:
        with SharedLoader(path, connect_timeout=10) as shared:
            batches = iter(shared)
            within(20, lambda: [next(batches) for _ in range(3)])
            time.sleep(0.5)  # the producer holds its slots full
            if kill == "process":
                os.kill(server.pid, signal.SIGKILL)
            else:
                os.killpg(server.pid, signal.SIGKILL)
            killed = time.monotonic()
            with pytest.raises(L3Error, match=f"BatchServer at {path} .*went away"):
                within(10, lambda: list(batches))
            assert time.monotonic() - killed < 5
    finally:
        stop(server)
    time.sleep(0.5)
    assert not (shm_names() - before), "segments left in /dev/shm"


def test_sigterm_removes_the_socket_and_the_consumer_hears_the_run_was_cut_short(tmp_path):
    path = str(tmp_path / "share.sock")
    server = start_server(path, {"batches": 1000, "pause": 0.01})
    try:
        with SharedLoader(path, connect_timeout=10) as shared:
            batches = iter(shared)
            within(20, lambda: next(batches))
            server.send_signal(signal.SIGTERM)
            with pytest.raises(L3Error, match="stopped before the run was over: SIGTERM"):
                within(10, lambda: list(batches))
        assert server.wait(10) == 128 + signal.SIGTERM
    finally:
        stop(server)
    assert not os.path.exists(path)


# -- items 5 and 16: where the socket lives, and waiting for it ---------------------------------
def test_a_directory_other_users_can_write_or_own_is_refused(tmp_path):
    class Never:
        def set_epoch(self, epoch):
            pass

        def __iter__(self):
            return iter(())

    like_tmp = tmp_path / "like-tmp"
    like_tmp.mkdir()
    os.chmod(like_tmp, 0o1777)
    with pytest.raises(L3Error, match="writable by other users"):
        within(5, lambda: BatchServer(Never(), like_tmp / "share.sock").run(1))
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, NOBODY, NOBODY)
        with pytest.raises(L3Error, match=r"belongs to nobody \(uid 65534\)"):
            within(5, lambda: BatchServer(Never(), theirs / "share.sock").run(1))
        squatted = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        squatted.bind(str(tmp_path / "share.sock"))
        os.chown(tmp_path / "share.sock", NOBODY, NOBODY)
        with pytest.raises(L3Error, match=r"socket of nobody \(uid 65534\): left alone"):
            within(5, lambda: BatchServer(Never(), tmp_path / "share.sock").run(1))
        assert os.path.exists(tmp_path / "share.sock")
        squatted.close()


def test_the_default_socket_is_in_a_private_per_user_directory(tmp_path, monkeypatch):
    from l3codec.share import default_socket_path
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = default_socket_path()
    assert path == str(tmp_path / f"l3-share-{os.geteuid()}" / "l3-share.sock")
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    os.chmod(os.path.dirname(path), 0o777)
    with pytest.raises(L3Error, match="writable by other users"):
        default_socket_path()


@as_root
def test_a_default_directory_another_user_made_first_is_refused_with_a_way_out(monkeypatch):
    from l3codec.share import default_socket_path
    like_tmp = tempfile.mkdtemp(prefix="l3-share-trust-")
    try:
        os.chmod(like_tmp, 0o1777)
        squatted = os.path.join(like_tmp, f"l3-share-{os.geteuid()}")
        make_it = "import os, sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777)"
        subprocess.run(["/usr/bin/python3", "-c", make_it, squatted], check=True, timeout=30, **as_user(NOBODY))
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
        monkeypatch.setattr(tempfile, "tempdir", like_tmp)
        with pytest.raises(L3Error, match=rf"{squatted} belongs to nobody \(uid 65534\): the default "
                                          r"directory is taken: pass a socket path .* or set XDG_RUNTIME_DIR"):
            default_socket_path()
        assert os.listdir(squatted) == []
    finally:
        shutil.rmtree(like_tmp, ignore_errors=True)


def test_a_consumer_waits_for_a_producer_started_later_over_a_stale_socket(tmp_path):
    path = str(tmp_path / "share.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)  # a killed producer's socket: the file stays, nobody listens
    stale.close()
    result = {}
    consumer = threading.Thread(target=lambda: result.update(keys=keys_of(path, connect_timeout=60)()), daemon=True)
    consumer.start()
    time.sleep(1.5)
    assert consumer.is_alive(), f"gave up at once: {result}"
    server = start_server(path, {"batches": 2})
    try:
        consumer.join(30)
        assert result.get("keys") == [[f"0-{n}-0", f"0-{n}-1"] for n in range(2)]
        assert server.wait(30) == 0
    finally:
        stop(server)


# -- item 17 and #37.6: a stopped consumer, and what a waiting producer says -------------------
STOPPABLE_CONSUMER = textwrap.dedent("""
    import sys
    from l3codec.format import L3Error
    from l3codec.share import SharedLoader
    path, out = sys.argv[1:3]
    with open(out, "w") as log:
        try:
            for batch in SharedLoader(path, connect_timeout=30):
                log.write("batch\\n")
                log.flush()
        except L3Error as error:
            log.write(f"L3Error: {error}\\n")
""")


def test_a_stopped_consumer_stalls_the_others_at_most_peer_timeout(tmp_path):
    path, out = str(tmp_path / "share.sock"), tmp_path / "stopped"
    timeout = 2.0
    server = start_server(path, {"batches": 12, "pause": 0.02, "server": {
        "slots": 2, "min_consumers": 2, "peer_timeout": timeout}}, stderr=subprocess.PIPE, text=True)
    stopped = subprocess.Popen([sys.executable, "-c", STOPPABLE_CONSUMER, path, str(out)])
    try:
        arrivals = []

        def take():
            with SharedLoader(path, connect_timeout=30) as shared:
                for batch in shared:
                    arrivals.append(time.monotonic())
                    if len(arrivals) == 2:
                        while not (out.exists() and out.read_text().count("batch") >= 1):
                            time.sleep(0.01)
                        os.kill(stopped.pid, signal.SIGSTOP)
                        arrivals.append(time.monotonic())  # the gap is measured from the stop
            return len(arrivals) - 1

        assert within(60, take) == 12
        gap = max(b - a for a, b in itertools.pairwise(arrivals[2:]))
        assert gap < timeout + 2, f"the others stalled {gap:.1f} s"
        assert server.wait(30) == 0
        os.kill(stopped.pid, signal.SIGCONT)
        assert stopped.wait(30) == 0
    finally:
        if stopped.poll() is None:
            os.kill(stopped.pid, signal.SIGCONT)
        stop(stopped)
        stop(server)
    assert "dropped this consumer: silent for" in out.read_text()
    log = server.stderr.read()
    assert log.count(f"waiting for 2 consumers at {path}") == 1, log
    assert f"dropped consumer pid {stopped.pid}" in log


PAUSING_CONSUMER = textwrap.dedent("""
    import sys, time
    from l3codec.format import L3Error
    from l3codec.share import SharedLoader
    path, out = sys.argv[1:3]
    with open(out, "w") as log:
        try:
            for number, batch in enumerate(SharedLoader(path, connect_timeout=30)):
                log.write("batch\\n")
                log.flush()
                if number == 1:
                    time.sleep(8)  # alive (its link thread pulses) but taking nothing: a breakpoint
        except L3Error as error:
            log.write(f"L3Error: {error}\\n")
""")


def test_a_live_consumer_that_stops_taking_batches_stalls_the_others_at_most_hold_timeout(tmp_path):
    path, out = str(tmp_path / "share.sock"), tmp_path / "paused"
    hold = 2.0
    server = start_server(path, {"batches": 12, "pause": 0.02, "server": {
        "slots": 2, "min_consumers": 2, "hold_timeout": hold}}, stderr=subprocess.PIPE, text=True)
    paused = subprocess.Popen([sys.executable, "-c", PAUSING_CONSUMER, path, str(out)])
    try:
        arrivals = []

        def take():
            with SharedLoader(path, connect_timeout=30) as shared:
                for batch in shared:
                    arrivals.append(time.monotonic())
            return len(arrivals)

        assert within(60, take) == 12
        gap = max(b - a for a, b in itertools.pairwise(arrivals))
        assert gap < hold + 2, f"the others stalled {gap:.1f} s behind a consumer paused for 8 s"
        assert server.wait(30) == 0
        assert paused.wait(30) == 0
    finally:
        stop(paused)
        stop(server)
    log = out.read_text()
    assert log.count("batch") >= 2 and "dropped this consumer: batch " in log and "not taken" in log, log
    assert f"dropped consumer pid {paused.pid}" in server.stderr.read()


# -- #37.8: consumers as multiprocessing children ----------------------------------------------
CHILDREN = textwrap.dedent("""
    import multiprocessing, sys
    from l3codec.share import SharedLoader

    def consume(path):
        for batch in SharedLoader(path, connect_timeout=30):
            pass

    if __name__ == "__main__":
        path = sys.argv[1]
        children = [multiprocessing.get_context("spawn").Process(target=consume, args=(path,)) for _ in range(3)]
        for child in children:
            child.start()
        for child in children:
            child.join(60)
            assert child.exitcode == 0, child.exitcode
""")


def test_multiprocessing_consumers_print_no_resource_tracker_errors(tmp_path):
    path = str(tmp_path / "share.sock")
    server = start_server(path, {"batches": 100, "server": {"min_consumers": 3}})
    try:
        script = tmp_path / "children.py"
        script.write_text(CHILDREN)
        children = subprocess.run([sys.executable, str(script), path], capture_output=True, text=True,
                                  timeout=90, check=False)
        assert server.wait(30) == 0
    finally:
        stop(server)
    assert children.returncode == 0, children.stderr
    assert "KeyError" not in children.stderr and "Traceback" not in children.stderr, children.stderr
