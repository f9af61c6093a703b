"""An S3-compatible server on 127.0.0.1 for the tests (moto's ThreadedMotoServer), and the environment
that points s3fs at it: the AWS conventions a user's job would use, never flags of ours.

No traffic leaves loopback: the endpoint is the local server, credentials are dummies, and the
instance-metadata lookup (169.254.169.254) is disabled.
"""

import os
import secrets

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
# Never look for credentials beyond the environment: no metadata service, no user's files.
NO_LOOKUPS = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
              "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_DEFAULT_REGION": "us-east-1"}
AWS_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
             "AWS_ENDPOINT_URL_S3")


def start():
    """A started ThreadedMotoServer on a free loopback port, and its endpoint URL."""
    import logging
    from moto.server import ThreadedMotoServer
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, "http://127.0.0.1:%d" % port


def environment(endpoint, credentials=True, base=None):
    """os.environ (or `base`) for a process whose s3:// goes to `endpoint`: AWS_ENDPOINT_URL_S3 and dummy keys."""
    env = {key: value for key, value in (os.environ if base is None else base).items() if key not in AWS_NAMES}
    env.update(NO_LOOKUPS, AWS_ENDPOINT_URL_S3=endpoint)
    if credentials:
        env.update(DUMMY_CREDENTIALS)
    return env


def new_bucket(filesystem):
    """A fresh, empty bucket: its name."""
    name = "test-" + secrets.token_hex(6)
    filesystem.mkdir(name)
    return name
