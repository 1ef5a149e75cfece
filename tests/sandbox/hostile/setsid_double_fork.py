# Leaves a grandchild behind in a new session, its parent gone; the value is its pid.
import os
import time

r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    os.write(w, str(pid).encode())
    os._exit(0)
int(os.read(r, 100))
