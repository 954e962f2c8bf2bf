"""Emulators in one process share the routes but not the state: each answers from its own."""

from __future__ import annotations

import httpx

from nightshift.emulator import EmulatorConfig, running_emulator

AUTH = {"authorization": "Bearer any-key"}
MESSAGE = {"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}


def test_two_emulators_keep_their_own_batches_files_config_and_logs() -> None:
    with (
        running_emulator() as first_url,
        running_emulator(EmulatorConfig(polls_to_end=3, api_key="second-key")) as second_url,
        httpx.Client(base_url=first_url, headers=AUTH) as first,
        httpx.Client(base_url=second_url, headers={"authorization": "Bearer second-key"}) as second,
    ):
        upload = first.post("/v1/files", files={"file": ("in.jsonl", b"{}\n")}, data={"purpose": "batch"})
        batch = first.post("/v1/messages/batches", json={"requests": [{"custom_id": "a", "params": MESSAGE}]})
        assert upload.status_code == 200 and batch.status_code == 200

        assert [f["id"] for f in first.get("/v1/files").json()["data"]] == [upload.json()["id"]]
        assert second.get("/v1/files").json()["data"] == []
        assert second.get(f"/v1/files/{upload.json()['id']}").status_code == 404
        assert second.get(f"/v1/messages/batches/{batch.json()['id']}").status_code == 404
        assert second.get("/v1/messages/batches").json()["data"] == []

        assert first.get("/_emulator/config").json()["polls_to_end"] == 0
        assert second.get("/_emulator/config").json()["polls_to_end"] == 3
        assert first.post("/v1/messages", json=MESSAGE).status_code == 200  # any key: no api_key set
        assert second.post("/v1/messages", json=MESSAGE, headers=AUTH).status_code == 401

        assert len(first.get("/_emulator/requests", params={"path": "/v1/messages"}).json()["data"]) == 1
        assert second.get("/_emulator/requests", params={"path": "/v1/messages"}).json()["data"] == []


def test_the_request_log_reads_from_a_time_on() -> None:
    with running_emulator() as url, httpx.Client(base_url=url, headers=AUTH) as client:
        assert client.post("/v1/messages", json=MESSAGE).status_code == 200
        first = client.get("/_emulator/requests", params={"path": "/v1/messages"}).json()["data"][0]["received_at"]
        assert client.post("/v1/messages", json=MESSAGE).status_code == 200

        log = client.get("/_emulator/requests", params={"path": "/v1/messages", "since": first}).json()["data"]
        assert len(log) == 1 and log[0]["received_at"] > first
        assert len(client.get("/_emulator/requests", params={"since": first - 1}).json()["data"]) == 2
        later = client.get("/_emulator/requests", params={"since": log[0]["received_at"], "path": "/v1/messages"})
        assert later.json()["data"] == []


def test_an_emulator_started_later_never_gives_an_id_an_earlier_one_gave() -> None:
    # A provider never gives an id twice: a database that outlives an emulator (two `make bench`
    # on one PostgreSQL database) must not see a batch id again from the next one.
    batch = {"requests": [{"custom_id": "a", "params": MESSAGE}]}
    ids: list[str] = []
    for _ in range(2):
        with running_emulator() as url, httpx.Client(base_url=url, headers=AUTH) as client:
            ids += [client.post("/v1/messages/batches", json=batch).json()["id"] for _ in range(2)]

    assert len(set(ids)) == 4, ids
    assert ids == sorted(ids), ids  # in creation order, as a provider lists them
