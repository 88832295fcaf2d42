"""The Azure Blob Storage checkpoint store: one container shared by many machines.

The blobs are those of ``azure-eventhub-checkpointstoreblob-aio``, so a consumer
group moves between geogateway and ``EventHubConsumerClient`` in either direction
without losing its place. Empty blobs, the record in their metadata, names
lower-cased as the SDK does::

    {namespace}/{eventhub}/{consumer_group}/ownership/{partition_id}   ownerid
    {namespace}/{eventhub}/{consumer_group}/checkpoint/{partition_id}  offset, sequencenumber
    {namespace}/{eventhub}/{consumer_group}/geogateway-heartbeats/{instance_id}

The SDK never lists the heartbeat prefix. The blob's etag is the ownership etag
and its ``Last-Modified`` the ownership time (the storage service's clock, shared
by every machine).

A wake sets the heartbeat blob's metadata to ``wake`` and ``beat`` (the instance's
own last heartbeat time, as listed, which listings then report: being woken makes
nobody look alive), with ``If-Match`` on the listed etag, so a heartbeat written
since is never rolled back. Each instance writes its heartbeat with ``If-Match`` on
the etag of its previous write: a 412 means it was woken, and it writes again
unconditionally (clearing the metadata). No request is added in steady state.

Claims are conditional uploads: ``If-Match: <etag>`` to take a record over,
``If-None-Match: *`` to create one. 412 or 409 means another instance got there
first and the claim is lost; any other error is raised, mapped onto the error
tree, and never taken as a won claim (the SDK's store keeps the claim then).

Fenced checkpoints, without a race window: read the checkpoint blob's etag, then
the ownership blob; if the caller still owns the partition, write the checkpoint
with ``If-Match`` on the etag read first. A new owner's claim that lands after the
ownership read, and its own checkpoint after that, changes the checkpoint's etag,
so the stale write fails (412) and is checked again. A stale write can still land
between a new owner's claim and that owner's first checkpoint; the new owner then
started from the older checkpoint and overwrites it, so no checkpoint written by
a later owner is ever replaced by an earlier owner's.

Errors: 412/409 on a claim is a lost claim; a wrong key, a missing container or
no permission is :class:`~replication.ConfigError`; anything else (network,
throttling, 5xx) is :class:`~replication.GatewayError`, to retry at the next
balancing round.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypedDict

import anyio
from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob.aio import BlobClient, ContainerClient

from gateway.consumer._records import Checkpoint, ConsumerGroupRef, Heartbeat, Ownership
from gateway.consumer._store import CheckpointStore
from replication import ConfigError, GatewayError, OwnershipLost

__all__ = ["BlobCheckpointStore"]

Credential = AzureNamedKeyCredential | AzureSasCredential | AsyncTokenCredential | str | None

# The SDK's blobs are empty: the record is all in the metadata.
_EMPTY = b""
_HEARTBEATS = "geogateway-heartbeats"
# How many times a fenced checkpoint is re-checked when another writer changes the
# checkpoint blob between our read and our write.
_FENCE_ATTEMPTS = 3


def _prefix(fqns: str, eventhub: str, consumer_group: str, kind: str) -> str:
    return f"{fqns}/{eventhub}/{consumer_group}/{kind}/".lower()


def _group_prefix(group: ConsumerGroupRef, kind: str) -> str:
    return _prefix(group.fully_qualified_namespace, group.eventhub_name, group.consumer_group,
                   kind)


def _blob_name(record: Ownership | Checkpoint, kind: str) -> str:
    prefix = _prefix(record.fully_qualified_namespace, record.eventhub_name,
                     record.consumer_group, kind)
    return f"{prefix}{record.partition_id}".lower()


class BlobCheckpointStore(CheckpointStore):
    """A :class:`CheckpointStore` in an Azure Blob Storage container (see the module doc).

    Args:
        container_client: an ``azure.storage.blob.aio.ContainerClient`` for an
            existing container. The caller keeps it and closes it; the store does
            not (use :meth:`from_connection_string` or :meth:`from_account_url`
            for a store that owns its client).
    """

    def __init__(self, container_client: ContainerClient) -> None:
        self._container = container_client
        self._owns_client = False
        self._beat_etags: dict[str, str] = {}  # heartbeat blob -> etag of our last write

    supports_wake = True

    @classmethod
    def from_account_url(
        cls, account_url: str, container_name: str, *, credential: Credential = None
    ) -> BlobCheckpointStore:
        """A store on ``container_name`` of the account at ``account_url``; closes its client.

        Args:
            account_url: ``https://ACCOUNT.blob.core.windows.net`` (or an emulator's).
            container_name: an existing container.
            credential: a key, SAS or token credential (``None`` if the URL has a SAS).
        """
        client = ContainerClient(account_url, container_name, credential=credential)
        return cls._owning(client)

    @classmethod
    def from_connection_string(
        cls, connection_string: str, container_name: str
    ) -> BlobCheckpointStore:
        """A store on ``container_name`` of a storage connection string; closes its client."""
        client = ContainerClient.from_connection_string(connection_string, container_name)
        return cls._owning(client)

    @classmethod
    def _owning(cls, client: ContainerClient) -> BlobCheckpointStore:
        store = cls(client)
        store._owns_client = True
        return store

    async def __aenter__(self) -> BlobCheckpointStore:
        # Narrows CheckpointStore.__aenter__'s return type for `async with ... as s`.
        return self

    # -- ownership -------------------------------------------------------------------

    async def list_ownership(self, group: ConsumerGroupRef) -> list[Ownership]:
        records = []
        async for blob in self._list(group, "ownership"):
            records.append(Ownership(
                **_fields(group),
                partition_id=blob.name.split("/")[-1],
                # The SDK releases a partition by writing an empty owner.
                owner_id=(blob.metadata or {}).get("ownerid") or "",
                last_modified_time=blob.last_modified.timestamp() if blob.last_modified else None,
                etag=_etag(blob.etag),
            ))
        return records

    async def claim_ownership(self, claims: Sequence[Ownership]) -> list[Ownership]:
        """See :meth:`CheckpointStore.claim_ownership`; the claims run concurrently.

        Raises:
            ConfigError: the container is missing or the credential is refused.
            GatewayError: any other storage error; the claims it hit are not won.
        """
        outcomes: list[Ownership | BaseException | None] = [None] * len(claims)

        async def attempt(index: int, claim: Ownership) -> None:
            try:
                outcomes[index] = await self._claim(claim)
            except GatewayError as exc:
                outcomes[index] = exc

        # Every claim runs to its end even if another fails, so that an error is
        # raised only once all uploads are settled (none left in flight).
        async with anyio.create_task_group() as group:
            for index, claim in enumerate(claims):
                group.start_soon(attempt, index, claim)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return [o for o in outcomes if isinstance(o, Ownership)]

    async def _claim(self, claim: Ownership) -> Ownership | None:
        blob = self._container.get_blob_client(_blob_name(claim, "ownership"))
        metadata = {"ownerid": claim.owner_id}
        try:
            if claim.etag is None:
                reply = await blob.upload_blob(
                    _EMPTY, metadata=metadata, overwrite=True,
                    match_condition=MatchConditions.IfMissing,
                )
            else:
                reply = await blob.set_blob_metadata(
                    metadata, etag=claim.etag, match_condition=MatchConditions.IfNotModified
                )
        except (ResourceModifiedError, ResourceExistsError):
            return None  # another instance changed or created the record first
        except ResourceNotFoundError as exc:
            if _container_missing(exc):
                raise self._mapped(exc, "claim ownership") from exc
            return None  # the record we read is gone: our etag is stale
        except AzureError as exc:
            raise self._mapped(exc, "claim ownership") from exc
        return Ownership(
            fully_qualified_namespace=claim.fully_qualified_namespace,
            eventhub_name=claim.eventhub_name,
            consumer_group=claim.consumer_group,
            partition_id=claim.partition_id,
            owner_id=claim.owner_id,
            last_modified_time=reply["last_modified"].timestamp(),
            etag=_etag(reply["etag"]),
        )

    # -- checkpoints -----------------------------------------------------------------

    async def update_checkpoint(self, checkpoint: Checkpoint, *, owner_id: str) -> None:
        """See :meth:`CheckpointStore.update_checkpoint` and the module doc (the fence).

        Raises:
            OwnershipLost: ``owner_id`` does not own the partition, or another writer
                kept changing its checkpoint while we tried.
            ConfigError: a position is missing (the SDK's layout needs both), the
                container is missing, or the credential is refused.
            GatewayError: any other storage error.
        """
        if checkpoint.offset is None or checkpoint.sequence_number is None:
            raise ConfigError(
                f"checkpoint of partition {checkpoint.partition_id} needs both offset and "
                "sequence_number: the Event Hubs SDK reads both from the blob"
            )
        metadata = {"offset": str(checkpoint.offset),
                    "sequencenumber": str(checkpoint.sequence_number)}
        target = self._container.get_blob_client(_blob_name(checkpoint, "checkpoint"))
        ownership = self._container.get_blob_client(_blob_name(checkpoint, "ownership"))
        for _ in range(_FENCE_ATTEMPTS):
            # Order matters: the checkpoint's etag is read before the owner is checked.
            etag = (await self._properties(target, "read a checkpoint")).get("etag")
            owner = (await self._properties(ownership, "read ownership")).get("ownerid")
            if owner != owner_id:
                raise OwnershipLost(
                    f"{owner_id} does not own partition {checkpoint.partition_id} of "
                    f"{checkpoint.eventhub_name}; checkpoint not written"
                )
            try:
                if etag is None:
                    await target.upload_blob(_EMPTY, metadata=metadata, overwrite=True,
                                             match_condition=MatchConditions.IfMissing)
                else:
                    await target.set_blob_metadata(
                        metadata, etag=etag, match_condition=MatchConditions.IfNotModified
                    )
                return
            except (ResourceModifiedError, ResourceExistsError):
                continue  # written by someone else since we read it: check the owner again
            except ResourceNotFoundError as exc:
                if _container_missing(exc):
                    raise self._mapped(exc, "write a checkpoint") from exc
                continue  # deleted since we read it: check again
            except AzureError as exc:
                raise self._mapped(exc, "write a checkpoint") from exc
        raise OwnershipLost(
            f"the checkpoint of partition {checkpoint.partition_id} of "
            f"{checkpoint.eventhub_name} kept changing under {owner_id}; another "
            "instance is checkpointing it"
        )

    async def list_checkpoints(self, group: ConsumerGroupRef) -> list[Checkpoint]:
        records = []
        async for blob in self._list(group, "checkpoint"):
            metadata = blob.metadata or {}
            sequence = metadata.get("sequencenumber")
            records.append(Checkpoint(
                **_fields(group),
                partition_id=blob.name.split("/")[-1],
                offset=metadata.get("offset"),
                sequence_number=None if sequence is None else int(sequence),
            ))
        return records

    # -- heartbeats ------------------------------------------------------------------

    async def heartbeat(self, heartbeat: Heartbeat) -> Heartbeat:
        # The instance id keeps its case: blob names are case-sensitive.
        name = _group_prefix(heartbeat.group, _HEARTBEATS) + heartbeat.instance_id
        blob = self._container.get_blob_client(name)
        etag, woken = self._beat_etags.pop(name, None), False
        try:
            try:
                if etag is None:
                    reply = await blob.upload_blob(_EMPTY, overwrite=True)
                else:
                    reply = await blob.upload_blob(_EMPTY, overwrite=True, etag=etag,
                                                   match_condition=MatchConditions.IfNotModified)
            except (ResourceModifiedError, ResourceNotFoundError) as exc:
                if isinstance(exc, ResourceNotFoundError) and _container_missing(exc):
                    raise
                # Someone wrote our record since our last write: a wake (or it is gone).
                woken = isinstance(exc, ResourceModifiedError)
                reply = await blob.upload_blob(_EMPTY, overwrite=True)
        except AzureError as exc:
            raise self._mapped(exc, "write a heartbeat") from exc
        self._beat_etags[name] = _etag(reply["etag"])
        return Heartbeat(
            **_fields(heartbeat.group),
            instance_id=heartbeat.instance_id,
            last_modified_time=reply["last_modified"].timestamp(),
            etag=_etag(reply["etag"]),
            woken=woken,
        )

    async def list_heartbeats(self, group: ConsumerGroupRef) -> list[Heartbeat]:
        prefix = _group_prefix(group, _HEARTBEATS)
        return [
            Heartbeat(
                **_fields(group),
                instance_id=blob.name[len(prefix):],
                last_modified_time=_beat_time(blob),
                etag=_etag(blob.etag) if blob.etag else None,
            )
            async for blob in self._list(group, _HEARTBEATS)
        ]

    async def wake(self, heartbeats: Sequence[Heartbeat]) -> None:
        for hb in heartbeats:
            if hb.etag is None or hb.last_modified_time is None:
                continue
            blob = self._container.get_blob_client(
                _group_prefix(hb.group, _HEARTBEATS) + hb.instance_id)
            metadata = {"wake": "1", "beat": repr(hb.last_modified_time)}
            try:
                await blob.set_blob_metadata(metadata, etag=hb.etag,
                                             match_condition=MatchConditions.IfNotModified)
            except (ResourceModifiedError, ResourceNotFoundError) as exc:
                if isinstance(exc, ResourceNotFoundError) and _container_missing(exc):
                    raise self._mapped(exc, "wake an instance") from exc
                continue  # it wrote a heartbeat since (or is gone): nothing to wake
            except AzureError as exc:
                raise self._mapped(exc, "wake an instance") from exc

    async def aclose(self) -> None:
        if self._owns_client:
            self._owns_client = False
            await self._container.close()

    # -- plumbing --------------------------------------------------------------------

    async def _list(self, group: ConsumerGroupRef, kind: str) -> AsyncIterator[Any]:
        pager = self._container.list_blobs(
            name_starts_with=_group_prefix(group, kind), include=["metadata"]
        )
        try:
            async for blob in pager:
                yield blob
        except AzureError as exc:
            raise self._mapped(exc, f"list {kind}") from exc

    async def _properties(self, blob: BlobClient, what: str) -> Mapping[str, str]:
        """The blob's etag and metadata in one dict; empty when the blob is missing."""
        try:
            properties = await blob.get_blob_properties()
        except ResourceNotFoundError as exc:
            if _container_missing(exc):
                raise self._mapped(exc, what) from exc
            return {}
        except AzureError as exc:
            raise self._mapped(exc, what) from exc
        return {**(properties.metadata or {}), "etag": properties.etag}

    def _mapped(self, exc: AzureError, what: str) -> GatewayError:
        where = f"container {self._container.container_name!r} at {self._container.url}"
        status = exc.status_code if isinstance(exc, HttpResponseError) else None
        if isinstance(exc, ClientAuthenticationError) or status in (401, 403):
            return ConfigError(f"checkpoint store {where} refused the credential ({what}): "
                               "check the account key, SAS or role assignment")
        if isinstance(exc, ResourceNotFoundError) and _container_missing(exc):
            return ConfigError(f"checkpoint store {where} does not exist ({what}): create it")
        detail = f"HTTP {status}" if status else type(exc).__name__
        return GatewayError(f"checkpoint store {where} failed to {what}: {detail}")


def _etag(value: str) -> str:
    # A reply header quotes the etag, a listing does not; Storage takes either in
    # If-Match. Records carry the listing's form, so that a claim's result equals
    # the record listed afterwards (as the SDK's own dicts from list_ownership).
    return value.strip('"')


def _beat_time(blob: Any) -> float | None:
    # A woken record keeps its owner's own last heartbeat time in its metadata.
    beat = (blob.metadata or {}).get("beat")
    if beat is not None:
        try:
            at = float(beat)
        except ValueError:
            at = math.nan
        if math.isfinite(at):
            return at
    return blob.last_modified.timestamp() if blob.last_modified else None


def _container_missing(exc: ResourceNotFoundError) -> bool:
    # A HEAD reply has no body; the storage client reads the code from a header.
    return getattr(exc, "error_code", None) == "ContainerNotFound"


class _GroupFields(TypedDict):
    fully_qualified_namespace: str
    eventhub_name: str
    consumer_group: str


def _fields(group: ConsumerGroupRef) -> _GroupFields:
    return {
        "fully_qualified_namespace": group.fully_qualified_namespace,
        "eventhub_name": group.eventhub_name,
        "consumer_group": group.consumer_group,
    }

