"""The judge of flotilla's S3 cache: boto3, the official AWS SDK for Python.

Run by tests/s3_moto.rs with the interpreter of moto's virtual environment (which has boto3):

    s3_judge.py presign ENDPOINT REGION BUCKET KEY SSE EPOCH   -> {"get": url, "put": url}
    s3_judge.py create-bucket ENDPOINT REGION BUCKET
    s3_judge.py get ENDPOINT REGION BUCKET KEY                 -> {"hex": ..., "sse": ...} or {"missing": true}
    s3_judge.py put ENDPOINT REGION BUCKET KEY HEX

Credentials are moto's test keys. `presign` freezes botocore's clock at EPOCH so its
signature can be compared with flotilla's for the same instant.
"""

import datetime
import json
import sys

import boto3
import botocore.auth
from botocore.config import Config

ACCESS_KEY = "testing"
SECRET_KEY = "testing"


def client(endpoint, region):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )


def main(argv):
    command, endpoint, region, bucket = argv[1:5]
    s3 = client(endpoint, region)
    if command == "presign":
        key, sse, epoch = argv[5], argv[6], int(argv[7])
        frozen = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
        botocore.auth.get_current_datetime = lambda: frozen
        put = {"Bucket": bucket, "Key": key}
        if sse:
            put["ServerSideEncryption"] = sse
        print(json.dumps({
            "get": s3.generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600
            ),
            "put": s3.generate_presigned_url("put_object", Params=put, ExpiresIn=3600),
        }))
    elif command == "create-bucket":
        where = {} if region == "us-east-1" else {
            "CreateBucketConfiguration": {"LocationConstraint": region}
        }
        s3.create_bucket(Bucket=bucket, **where)
    elif command == "get":
        key = argv[5]
        try:
            o = s3.get_object(Bucket=bucket, Key=key)
        except s3.exceptions.NoSuchKey:
            print(json.dumps({"missing": True}))
            return
        print(json.dumps({
            "hex": o["Body"].read().hex(),
            "sse": o.get("ServerSideEncryption", ""),
        }))
    elif command == "put":
        key, data = argv[5], bytes.fromhex(argv[6])
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
