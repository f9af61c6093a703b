"""How long a test waits for what must come before it calls it a hang.

A test never bounds wall-clock time: on a busy machine (other work on the same cores) everything takes
longer, and a test that fails for that says nothing of the code. A test bounds what the code does instead:
the tries it made, the waits it asked for (a patched sleep records them), the rows it computed.

So every timeout and deadline of the tests (a child process that must exit, a row that must be committed, a
page that must load, a thread that must end) is HANG_SECONDS: a guard against a child that never exits or an
event that never comes, so that the suite fails instead of hanging, never a bound on speed. It is far above
what any such wait takes on the slowest and busiest machine the suite has run on (the whole suite took 20
minutes there, at a load average of 11 to 13 on 2 cores).
"""

HANG_SECONDS = 600
