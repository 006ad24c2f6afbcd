#!/usr/bin/env python3
"""binky-adapter-filestore: a slice is a folder. Dependency-free.

Install: copy (or symlink) this file onto PATH as `binky-adapter-filestore`,
then use `adapter = "filestore"` in binky.toml. Option `root` picks where the
folders live (default: the data_dir Binky passes in).
"""
import json, os, shutil, sys

def main(verb, req):
    root = req["config"].get("root") or req["data_dir"]
    path = os.path.join(root, req["slice"])
    if verb == "provision":
        os.makedirs(path)  # an existing slice is an error, as the contract says
    elif verb == "teardown":
        shutil.rmtree(path, ignore_errors=True)
    elif verb == "resolve":
        return {"address": "file://" + path}
    elif verb == "exists":
        return {"exists": os.path.isdir(path)}
    elif verb == "capabilities":
        return {"capabilities": ["clone"]}
    elif verb == "clone":
        shutil.copytree(os.path.join(root, req["template"]), path)
    else:
        raise ValueError("unknown verb " + verb)
    return {}

try:
    reply = {"ok": True, **main(sys.argv[1], json.load(sys.stdin))}
except Exception as e:  # every failure is a reply, not a traceback
    reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
print(json.dumps(reply))
