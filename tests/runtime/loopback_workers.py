"""TFF workers on loopback for tests: started as `scripts/worker` starts them (version stamp,
bound to this process's life), each stopped and checked gone afterwards (no orphan)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import tempfile
from typing import Iterator, Optional

from dp_fl.execution import runtime
from scripts import worker as worker_script


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class Worker:
  """One TFF worker_binary on loopback in `run_dir`, which holds its version stamp (`stamp`
  overrides the stamp's versions; `stamp=False` starts a bare worker_binary without one)."""

  def __init__(self, run_dir: str, port: Optional[int] = None, stamp=None):
    self.port = port or free_port()
    binary = worker_script.worker_binary_path()
    if stamp is False:
      self.process = runtime.start_worker_process([binary, f"--port={self.port}"], cwd=run_dir)
    else:
      self.process = worker_script.start_worker(binary, self.port, -1, run_dir, stamp)

  @property
  def address(self) -> str:
    return f"localhost:{self.port}"

  def stop(self) -> None:
    if self.process.poll() is None:
      self.process.send_signal(signal.SIGCONT)  # A SIGSTOPped worker must die too.
      self.process.kill()
    self.process.wait(timeout=30)


class Pool:
  """Starts workers on demand (`pool.start(count)`); `close` stops them all and checks that
  none is left running."""

  def __init__(self, directory: str):
    os.makedirs(directory, exist_ok=True)
    self._directory = directory
    self.started: list[Worker] = []

  def start(self, count: int = 1, port: Optional[int] = None, stamp=None) -> list[Worker]:
    new = [Worker(tempfile.mkdtemp(dir=self._directory), port, stamp) for _ in range(count)]
    self.started.extend(new)
    return new

  def close(self) -> None:
    for worker in self.started:
      worker.stop()
    orphans = [w.process.pid for w in self.started if w.process.poll() is None]
    assert not orphans, f"workers still running: {orphans}"


@contextlib.contextmanager
def pool(directory: str) -> Iterator[Pool]:
  started = Pool(directory)
  try:
    yield started
  finally:
    started.close()


def addresses(workers: list[Worker]) -> str:
  """The `--workers` value for `workers`."""
  return ",".join(w.address for w in workers)


def write_certificates(directory: str) -> dict[str, str]:
  """A test CA and, signed by it, a server certificate for localhost / 127.0.0.1 and a client
  certificate, as PEM files in `directory`: {"ca", "server_cert", "server_key", "client_cert",
  "client_key"} -> path."""
  import datetime  # pylint: disable=g-import-not-at-top
  import ipaddress  # pylint: disable=g-import-not-at-top
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives import hashes  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives import serialization  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=g-import-not-at-top
  from cryptography.x509.oid import NameOID  # pylint: disable=g-import-not-at-top

  now = datetime.datetime.now(datetime.timezone.utc)

  def certificate(name, key, issuer_name, issuer_key, ca=False, sans=()):
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(issuer_name).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
      builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())

  def write(name, data):
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
      f.write(data)
    return path

  def key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())

  os.makedirs(directory, exist_ok=True)
  ca_key = ec.generate_private_key(ec.SECP256R1())
  ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dp_fl test CA")])
  ca = certificate("dp_fl test CA", ca_key, ca_name, ca_key, ca=True)
  server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
      ec.SECP256R1())
  server = certificate("localhost", server_key, ca_name, ca_key, sans=(
      x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))))
  client = certificate("dp_fl trainer", client_key, ca_name, ca_key)
  pem = serialization.Encoding.PEM
  return {"ca": write("ca.pem", ca.public_bytes(pem)),
          "server_cert": write("server.pem", server.public_bytes(pem)),
          "server_key": write("server.key", key_pem(server_key)),
          "client_cert": write("client.pem", client.public_bytes(pem)),
          "client_key": write("client.key", key_pem(client_key))}


class TlsFront:
  """A TLS terminator on loopback in front of a plaintext worker port — what a sidecar
  (ghostunnel, stunnel, Envoy) does on a worker host: TLS (ALPN h2, the client certificate
  required when `client_ca` is given) on `port`, bytes forwarded to `backend_port`."""

  def __init__(self, backend_port: int, cert: str, key: str, client_ca: Optional[str] = None):
    import ssl  # pylint: disable=g-import-not-at-top
    import threading  # pylint: disable=g-import-not-at-top
    self._ssl = ssl
    self._backend_port = backend_port
    self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    self._context.load_cert_chain(cert, key)
    self._context.set_alpn_protocols(["h2"])
    if client_ca is not None:
      self._context.verify_mode = ssl.CERT_REQUIRED
      self._context.load_verify_locations(client_ca)
    self._listener = socket.create_server(("127.0.0.1", 0))
    self.port = self._listener.getsockname()[1]
    self.handshake_failures = 0
    self._closed = False
    threading.Thread(target=self._serve, daemon=True).start()

  @property
  def address(self) -> str:
    return f"localhost:{self.port}"

  def _serve(self) -> None:
    import threading  # pylint: disable=g-import-not-at-top
    while not self._closed:
      try:
        connection, _ = self._listener.accept()
      except OSError:
        return
      threading.Thread(target=self._forward, args=(connection,), daemon=True).start()

  def _forward(self, connection: socket.socket) -> None:
    import threading  # pylint: disable=g-import-not-at-top
    try:
      secure = self._context.wrap_socket(connection, server_side=True)
    except (OSError, self._ssl.SSLError):
      self.handshake_failures += 1
      connection.close()
      return
    backend = socket.create_connection(("127.0.0.1", self._backend_port))

    def pump(source, sink):
      try:
        while True:
          data = source.recv(1 << 16)
          if not data:
            break
          sink.sendall(data)
      except OSError:
        pass
      finally:
        for s in (source, sink):
          with contextlib.suppress(OSError):
            s.close()

    threading.Thread(target=pump, args=(backend, secure), daemon=True).start()
    pump(secure, backend)

  def close(self) -> None:
    self._closed = True
    self._listener.close()
