"""The judges of flotilla's GCS cache: google-cloud-storage (Google's client library for
Python) and gcp-storage-emulator. Run by tests/gcs_emulator.rs with the interpreter of the venv
scripts/setup.d/storage.sh makes:

    gcs_judge.py keygen DIR                      -> writes DIR/sa.json, a service account key file
    gcs_judge.py sign KEYFILE METHOD BUCKET OBJECT EXPIRES CONTENT_TYPE [NAME:VALUE ...]
                                                 -> the V2 signed URL Google's library makes
    gcs_judge.py create-bucket ENDPOINT BUCKET
    gcs_judge.py get ENDPOINT BUCKET OBJECT      -> {"hex": ...} or {"missing": true}
    gcs_judge.py put ENDPOINT BUCKET OBJECT HEX
"""

import datetime
import json
import os
import sys


def keygen(directory):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path = os.path.join(directory, "sa.json")
    with open(path, "w") as f:
        json.dump({
            "type": "service_account",
            "project_id": "flotilla-test",
            "private_key_id": "0",
            "private_key": pem,
            "client_email": "cache@flotilla-test.iam.gserviceaccount.com",
            "client_id": "0",
            "token_uri": "https://oauth2.googleapis.com/token",
        }, f)
    print(path)


def sign(keyfile, method, bucket, obj, expires, content_type, headers):
    from google.cloud import storage
    from google.oauth2 import service_account

    credentials = service_account.Credentials.from_service_account_file(keyfile)
    # A client that never calls out: it only carries the universe the URL is signed for.
    offline = storage.Client(project="flotilla-test", credentials=credentials)
    blob = storage.Bucket(client=offline, name=bucket).blob(obj)
    print(blob.generate_signed_url(
        expiration=datetime.datetime.fromtimestamp(int(expires), datetime.timezone.utc),
        method=method,
        content_type=content_type or None,
        headers=dict(h.split(":", 1) for h in headers) or None,
        version="v2",
        credentials=credentials,
        api_access_endpoint="https://storage.googleapis.com",
    ))


def client(endpoint):
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="flotilla-test", credentials=AnonymousCredentials())


def main(argv):
    command = argv[1]
    if command == "keygen":
        keygen(argv[2])
    elif command == "sign":
        sign(argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], argv[8:])
    elif command == "create-bucket":
        client(argv[2]).create_bucket(argv[3])
    elif command == "get":
        blob = client(argv[2]).bucket(argv[3]).blob(argv[4])
        if not blob.exists():
            print(json.dumps({"missing": True}))
        else:
            print(json.dumps({"hex": blob.download_as_bytes().hex()}))
    elif command == "put":
        client(argv[2]).bucket(argv[3]).blob(argv[4]).upload_from_string(bytes.fromhex(argv[5]))
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
