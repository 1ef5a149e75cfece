# Calls search in a loop; run it with --max-calls 5 to see the parent's quota stop it.
from protocol import CallError

done = 0
try:
    for _ in range(100):
        host.search("a")
        done += 1
except CallError as exc:
    print(f"stopped after {done} calls: {exc}")
done
