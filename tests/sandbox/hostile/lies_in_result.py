# Makes one call, then forges the runner's Result with invented counts and exits.
import os
import sys

from protocol import VERSION, Result, frame_message

host.echo(1)
frame = sys._getframe()
start = None
while frame is not None:
    for value in list(frame.f_locals.values()):
        if type(value).__name__ == "Start":
            start = value
    frame = frame.f_back
assert start is not None, "no Start found on the stack"
forged = Result(v=VERSION, result_id=start.result_id, ok=True, value="1", calls=1000, bytes=10**9)
# The runner's own arguments, found up the stack (the program's sys.argv is its own):
# the channels' descriptors, start (read, write) and call (read, write).
frame = sys._getframe()
while frame is not None and type(frame.f_locals.get("args")).__name__ != "Arguments":
    frame = frame.f_back
assert frame is not None, "no runner Arguments found on the stack"
fds = (*frame.f_locals["args"].start_fds, *frame.f_locals["args"].call_fds)
os.write(fds[1], frame_message(forged))
os._exit(0)
