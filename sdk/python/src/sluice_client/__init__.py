"""sluice-client: enqueue jobs into Sluice through its gate's HTTP API,
verify signed group callbacks, serve the worker's http handler, and
look up, list, cancel and delete jobs, groups and topics through the
admin API (AdminClient).

    from sluice_client import Client
    c = Client("http://127.0.0.1:8080")
    res = c.enqueue("jobs", "hello", {"greeting": "<hi> & welcome"}, retain=3600)

The same contract as the Go client (github.com/sluicehq/sluice/client):
sdk/testdata holds the vectors all three clients are tested against.
"""

from ._admin import AdminClient, JobChange, JobListing, JobPage, TopicDeleted, TopicQueue, TopicState
from ._client import (
    BatchResult,
    Client,
    GroupCancelled,
    GroupResult,
    GroupStatus,
    ItemResult,
    Job,
    JobInfo,
    Result,
    RetryPolicy,
)
from ._errors import BatchError, SluiceConnectionError, SluiceError
from ._wire import Raw, new_id
from .callback import (
    BadSignature,
    NoSignature,
    NoV2Signature,
    ShortSecret,
    SignatureError,
    StaleSignature,
    verify_callback,
    verify_signature,
)
from .handler import Delivery, Kill, RetryLater, asgi_handler, callback_asgi, callback_wsgi, serve, wsgi_handler

__all__ = [
    "AdminClient", "GroupCancelled", "JobChange", "JobListing", "JobPage", "TopicDeleted", "TopicQueue", "TopicState",
    "BadSignature", "BatchError", "BatchResult", "Client", "Delivery", "GroupResult", "GroupStatus", "ItemResult",
    "Job", "JobInfo", "Kill", "NoSignature", "NoV2Signature", "Raw", "Result", "RetryLater", "RetryPolicy",
    "ShortSecret", "SignatureError", "SluiceConnectionError", "SluiceError", "StaleSignature", "asgi_handler",
    "callback_asgi", "callback_wsgi", "new_id", "serve", "verify_callback", "verify_signature", "wsgi_handler",
]
