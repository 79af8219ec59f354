#!/usr/bin/env python3
"""tests/cluster/nfs3-replay.py ADDR XID NAME [COUNT] - an NFSv3 client that retransmits.

Sends one NFSv3 REMOVE of NAME (in the export's root, MOUNT "/" on port 2049) with RPC xid XID,
COUNT times (default 1) on one TCP connection, as a client retransmits a call whose reply it
did not see; prints the status of each reply (NFS3_OK, NFS3ERR_NOENT, ...). The same XID sent
again to the same head is answered from its duplicate request cache (NFS3_OK again); sent to
another head after a failover, the REMOVE runs anew (NFS3ERR_NOENT): the cache is per head.
AUTH_SYS as root, from a fixed machine name, so every run is the same client to the server.
"""
import socket
import struct
import sys

NFS3ERR = {0: "NFS3_OK", 2: "NFS3ERR_NOENT", 13: "NFS3ERR_ACCES", 70: "NFS3ERR_STALE"}


def opaque(b):
    return struct.pack(">I", len(b)) + b + b"\0" * ((4 - len(b) % 4) % 4)


def call(sock, xid, prog, vers, proc, args):
    cred = struct.pack(">I", 0) + opaque(b"tarn-failover") + struct.pack(">III", 0, 0, 0)
    msg = struct.pack(">IIIIII", xid, 0, 2, prog, vers, proc)
    msg += struct.pack(">I", 1) + opaque(cred) + struct.pack(">II", 0, 0) + args
    sock.sendall(struct.pack(">I", 0x80000000 | len(msg)) + msg)
    data = b""
    while True:  # record fragments until the last one
        hdr = recv(sock, 4)
        (mark,) = struct.unpack(">I", hdr)
        data += recv(sock, mark & 0x7FFFFFFF)
        if mark & 0x80000000:
            break
    rxid, mtype, stat = struct.unpack(">III", data[:12])
    assert rxid == xid and mtype == 1 and stat == 0, "call not accepted"
    (vlen,) = struct.unpack(">I", data[16:20])
    off = 20 + vlen + (4 - vlen % 4) % 4
    (accept,) = struct.unpack(">I", data[off:off + 4])
    assert accept == 0, f"accept_stat {accept}"
    return data[off + 4:]


def recv(sock, n):
    b = b""
    while len(b) < n:
        c = sock.recv(n - len(b))
        if not c:
            raise EOFError("connection closed")
        b += c
    return b


def main():
    addr, xid, name = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    s = socket.create_connection((addr, 2049), timeout=10)
    r = call(s, xid ^ 0x5A5A5A5A, 100005, 3, 1, opaque(b"/"))  # MOUNT MNT "/"
    (mst,) = struct.unpack(">I", r[:4])
    assert mst == 0, f"MNT: {mst}"
    (flen,) = struct.unpack(">I", r[4:8])
    fh = r[8:8 + flen]
    for _ in range(count):
        r = call(s, xid, 100003, 3, 12, opaque(fh) + opaque(name))  # REMOVE
        (st,) = struct.unpack(">I", r[:4])
        print(NFS3ERR.get(st, str(st)))


if __name__ == "__main__":
    main()
