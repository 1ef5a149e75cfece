"""Fuzz targets for every role of the wire, and the command that runs them for long.

``targets.py`` holds one target per role: the four sans-I/O cores (:class:`ServerCore`,
:class:`ClientCore`, :class:`StarterCore`, :class:`RunnerCore`) and the real
:class:`Server` over OS pipes. Each takes the fuzzer's bytes, reads them as a script of
operations (frames to feed, valid or hostile, cut anywhere; calls to make and to settle;
time passing; end of stream) and checks, after every step, what the protocol promises
whatever the bytes:

* only the protocol's own errors (:class:`~protocol.ProtocolError`) leave a role;
* no call is answered twice;
* the in-flight cap holds;
* no request is lost: every call is answered once, or handed back when the channel ends;
* (the Server) it neither hangs nor leaves a handler unawaited.

The suite runs each target under a short Hypothesis profile (``test_fuzz.py``). A long
campaign runs them under atheris (libFuzzer), coverage-guided::

    python -m tests.fuzz TARGET -runs=1000000

This package imports nothing of ``protocol`` itself, so that the runner can instrument
``protocol`` for coverage before it is loaded.
"""
