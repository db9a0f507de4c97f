"""The judge of flotilla's Azure cache: azure-storage-blob (Azure's client library for Python)
against Azurite. Run by tests/azurite.rs with the interpreter of the venv
scripts/setup.d/storage.sh makes; CONNECTION is an Azurite connection string.

    azure_judge.py create-container CONNECTION CONTAINER
    azure_judge.py get CONNECTION CONTAINER BLOB        -> {"hex": ...} or {"missing": true}
    azure_judge.py put CONNECTION CONTAINER BLOB HEX
"""

import json
import sys

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient


def main(argv):
    command, connection, container = argv[1:4]
    service = BlobServiceClient.from_connection_string(connection)
    if command == "create-container":
        service.create_container(container)
    elif command == "get":
        blob = service.get_blob_client(container, argv[4])
        try:
            data = blob.download_blob().readall()
        except ResourceNotFoundError:
            print(json.dumps({"missing": True}))
            return
        print(json.dumps({"hex": data.hex()}))
    elif command == "put":
        service.get_blob_client(container, argv[4]).upload_blob(
            bytes.fromhex(argv[5]), overwrite=True
        )
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
