#!/usr/bin/env python3
"""Run cm_sync_server.py and cm_sync_client.py as two processes and report both outcomes.

Usage: cm_sync_driver.py [ADDRESS]

Shape: the launcher scripts that come with two-sided RDMA examples (rdma-core's
tests/run_tests.py-style harnesses, the start-server-then-client recipes of rdma_server /
rdma_client and ib_write_bw): start the server with the same interpreter (sys.executable), wait
until it says it listens, start the client, wait for both with a time limit. Uses no pyverbs
itself. The port is picked at random (20000..29999) so that runs do not collide; the address is
passed on when given, else '-' tells each script to find its device's address itself.

What it does: runs both scripts (each has 40 s), relays their output with a prefix, and checks
that both exit 0 and print their OK line. Prints "OK cm_sync_driver", or which side failed how.
"""
import os
import random
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def relay(proc, tag, lines, ready=None):
    for line in proc.stdout:
        line = line.rstrip('\n')
        lines.append(line)
        print(f'[{tag}] {line}', flush=True)
        if ready is not None and line.startswith('LISTENING'):
            ready.set()


def main():
    port = str(random.randint(20000, 29999))
    addr = sys.argv[1] if len(sys.argv) > 1 else '-'   # '-': the scripts find the address themselves
    server = subprocess.Popen([sys.executable, os.path.join(HERE, 'cm_sync_server.py'), addr, port],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server_lines, ready = [], threading.Event()
    t_server = threading.Thread(target=relay, args=(server, 'server', server_lines, ready), daemon=True)
    t_server.start()
    deadline = time.monotonic() + 20
    while not ready.is_set() and server.poll() is None and time.monotonic() < deadline:
        ready.wait(0.1)
    if not ready.is_set():
        server.kill()
        t_server.join(2)
        print(f'FAIL cm_sync_driver: the server did not start listening (exit {server.poll()}): '
              f'{" | ".join(server_lines[-5:])}')
        return 1
    listening = [line for line in server_lines if line.startswith('LISTENING')][0].split()
    client = subprocess.Popen([sys.executable, os.path.join(HERE, 'cm_sync_client.py'), listening[1], listening[2]],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client_lines = []
    t_client = threading.Thread(target=relay, args=(client, 'client', client_lines), daemon=True)
    t_client.start()
    results = {}
    for name, proc in (('client', client), ('server', server)):
        try:
            results[name] = proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            results[name] = 'timeout'
    t_server.join(2)
    t_client.join(2)
    ok = {'server': 'OK cm_sync_server' in server_lines, 'client': 'OK cm_sync_client' in client_lines}
    bad = [f'{name} exit {results[name]}' for name in ('server', 'client') if results[name] != 0 or not ok[name]]
    if bad:
        print(f'FAIL cm_sync_driver: {", ".join(bad)}')
        return 1
    print('OK cm_sync_driver')
    return 0


if __name__ == '__main__':
    sys.exit(main())
