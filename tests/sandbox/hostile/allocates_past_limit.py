# Allocates (and touches) 1 GiB, far past any small memory limit.
chunks = []
for _ in range(64):
    chunks.append(bytearray(16 << 20))
len(chunks)
