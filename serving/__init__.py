"""The server: the processes (server.py), the ASGI front that receives each
request whole before it takes a thread (asgi.py, front.py, environ.py), the
lanes of threads (lanes.py), what the doors and the database hand it
(doors.py), acquires that wait (waiting.py) and history exports in a
helper process (long_reads.py). config/asgi.py puts it on Django's app."""
