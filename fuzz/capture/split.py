# Cuts the streams proxy.py recorded (c2s.N in the current directory) into
# seed-libnfs-* inputs for each fuzz target. usage: python3 split.py fuzz/corpus
import struct, glob, os, sys
root = sys.argv[1]
def records(stream):
    i, cur, out = 0, b"", []
    while i + 4 <= len(stream):
        h = struct.unpack(">I", stream[i:i+4])[0]; n = h & 0x7fffffff
        cur += stream[i+4:i+4+n]; i += 4 + n
        if h & 0x80000000: out.append(cur); cur = b""
    return out
def opaque_end(b, at):
    n = struct.unpack(">I", b[at:at+4])[0]
    return at + 4 + ((n + 3) & ~3)
def parse(r):
    xid, mtype, rv, prog, vers, proc = struct.unpack(">6I", r[:24])
    at = opaque_end(r, 28)       # cred (flavor at 24)
    at = opaque_end(r, at + 4)   # verf
    return prog, vers, proc, r[at:]
def w(target, name, data):
    d = os.path.join(root, target); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "seed-libnfs-" + name), "wb").write(data)
streams = {f: open(f, "rb").read() for f in glob.glob("c2s.*")}
v3 = [s for s in streams.values() if any(parse(r)[:2] == (100003, 3) for r in records(s))]
v4 = [s for s in streams.values() if any(parse(r)[:2] == (100003, 4) for r in records(s))]
v3.sort(key=len); v4.sort(key=len)
w("record", "v3-session", b"\x05" + v3[-1])
w("record", "v4-session", b"\x11" + v4[-1])
w("pipeline", "v3-session", v3[-1])
w("pipeline", "v4-session", v4[-1])
seen = set()
p3 = {1:"Getattr3args",2:"Setattr3args",3:"Lookup3args",4:"Access3args",6:"Read3args",7:"Write3args",8:"Create3args",16:"Readdir3args",17:"Readdirplus3args",18:"Fsstat3args",19:"Fsinfo3args",20:"Pathconf3args",21:"Commit3args"}
# proto_args selectors: the table's order (tarn_fuzz::proto_args::TABLE)
table = ["mount::Dirpath","Getattr3args","Setattr3args","Lookup3args","Access3args","Readlink3args","Read3args","Write3args","Create3args","Mkdir3args","Symlink3args","Mknod3args","Remove3args","Rmdir3args","Rename3args","Link3args","Readdir3args","Readdirplus3args","Fsstat3args","Fsinfo3args","Pathconf3args","Commit3args"]
calls3, cmp4 = [], []
for s in [v3[-1], v4[-1]] + v3 + v4:
    for r in records(s):
        prog, vers, proc, args = parse(r)
        key = (prog, vers, proc)
        if prog == 100003 and vers == 4 and proc == 1:
            cmp4.append(args)
        if key in seen: continue
        seen.add(key)
        w("rpc_call", f"{prog}-{vers}-{proc}", r)
        if prog == 100005 and proc == 1:
            w("proto_args", "mnt", bytes([table.index("mount::Dirpath")]) + args)
        if prog == 100003 and vers == 3 and proc in p3:
            w("proto_args", p3[proc], bytes([table.index(p3[proc])]) + args)
# NFSv3 session as nfs3_exec calls (the handles are another server's: the fuzzer must get past BADHANDLE).
for r in records(v3[-1]):
    prog, vers, proc, args = parse(r)
    if prog == 100005: calls3.append(bytes([2, proc]) + args)
    elif prog == 100003 and vers == 3: calls3.append(bytes([0, proc]) + args)
w("nfs3_exec", "v3-session", b"#CALL".join(calls3[:16]))
# NFSv4.0 COMPOUNDs: each alone for decoding, the session in order for execution.
uniq = []
for c in cmp4:
    if c not in uniq: uniq.append(c)
for i, c in enumerate(uniq[:6]):
    w("compound_decode", f"v40-{i}", b"\x00" + c)
w("compound_exec", "v40-session", b"\x00" + b"#CMP".join(cmp4[:8]))
