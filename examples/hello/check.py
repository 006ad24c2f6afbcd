"""`binky verify` check: the web page lists the seeded greetings."""
import os
import sys
import urllib.request

port = os.environ["BINKY_PORT_WEB"]
body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read().decode()
if "hallo" not in body:
    sys.exit(f"unexpected page: {body[:200]}")
print("web page ok")
