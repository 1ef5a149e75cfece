# Closes both protocol channels under the runner, then waits.
import os
import sys
import time

# The runner's own arguments, found up the stack (the program's sys.argv is its own):
# the channels' descriptors, start (read, write) and call (read, write).
frame = sys._getframe()
while frame is not None and type(frame.f_locals.get("args")).__name__ != "Arguments":
    frame = frame.f_back
assert frame is not None, "no runner Arguments found on the stack"
fds = (*frame.f_locals["args"].start_fds, *frame.f_locals["args"].call_fds)
for fd in fds:
    os.close(fd)
time.sleep(600)
