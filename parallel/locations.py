"""Where a file is: a local path, or a URL of an object store or web server (s3://b/k, https://h/p).

The input layer (images in stores) and the output layer (outputs in stores) ask the same question;
this module answers it once and imports nothing.
"""

import re

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")


def is_url(location):
    """Whether `location` (str or Path) is a URL such as s3://bucket/key or https://host/path, not a local path.

    A Path is never one (Path folds "s3://b" into "s3:/b"); file:// is a local path.
    """
    match = _URL.match(location) if isinstance(location, str) else None
    return match is not None and match.group(1).lower() != "file"
