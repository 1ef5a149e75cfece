# Four searches at once (about 50 ms in all, not 200), then a summary of what was found.
import asyncio

queries = ["async", "json", "process", "concurrency"]
results = await asyncio.gather(*(host.search(q) for q in queries))
names = sorted({hit["name"] for hits in results for hit in hits})
words = await host.word_count(" ".join(hit["summary"] for hits in results for hit in hits))
print(f"{len(queries)} searches, {len(names)} libraries")
{"libraries": names, "words": words}
