"""A bulk group of 1,000 items, each served through the worker's http handler
by thumb() below, run to its callback. Against make run with the handler:
  make run DEV_FLAGS='--http thumb=http://127.0.0.1:8787/'
  PYTHONPATH=sdk/python/src python3 sdk/python/examples/bulkgroup.py
"""
import os, sys, threading
from sluice_client import Client, Kill, callback_wsgi, serve, wsgi_handler

GATE, PORT = os.environ.get("SLUICE_GATE", "http://127.0.0.1:8080"), int(os.environ.get("THUMB_PORT", "8787"))
done = threading.Event()

def thumb(job):  # the worker POSTs each item here: a 2xx is its result
    if job.payload["w"] <= 0:
        raise Kill("width must be positive")  # a 4xx: the item is dead, not retried
    return {"thumb": f"{job.payload['src']}@{job.payload['w']}px"}

def on_callback(cb):  # the coordinator POSTs the results once every item ended
    print(f"callback: group {cb['group']}: {cb['total']} items, {cb['done']} done, {cb['dead']} dead")
    done.set()

serve(wsgi_handler(thumb), "127.0.0.1", PORT)
receiver = serve(callback_wsgi(on_callback, secrets=None))  # plain sluice dev signs nothing: else secrets=[...]
items = [{"src": f"img{i}.png", "w": 64} for i in range(int(os.environ.get("ITEMS", "1000")))]
g = Client(GATE).enqueue_group("jobs", os.environ.get("THUMB_TYPE", "thumb"), items,
                               callback=f"http://127.0.0.1:{receiver.server_address[1]}/done")
print(f"group {g.group}: {g.count} items in Kafka")
sys.exit(0 if done.wait(300) else "no callback within 5 minutes")
