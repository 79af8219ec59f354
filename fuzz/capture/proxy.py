# Forwards 127.0.0.1:LPORT to 127.0.0.1:RPORT and records what each client
# connection sends to OUT.N (fuzz seeds from real clients traffic).
# usage: python3 proxy.py LPORT RPORT OUT
import socket, threading, sys
lport, rport, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", lport)); ls.listen(16)
n = [0]
def pipe(a, b, f):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            if f: f.write(d); f.flush()
            b.sendall(d)
    except OSError: pass
    finally:
        try: b.shutdown(socket.SHUT_WR)
        except OSError: pass
while True:
    c, _ = ls.accept()
    s = socket.create_connection(("127.0.0.1", rport))
    n[0] += 1
    f = open(f"{out}.{n[0]}", "wb")
    threading.Thread(target=pipe, args=(c, s, f), daemon=True).start()
    threading.Thread(target=pipe, args=(s, c, None), daemon=True).start()
