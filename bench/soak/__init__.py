"""The soak of issue 7 (point 4): a long churn through the real pipeline with a processor
restarted every few seconds, judged on memory growth, lag and lost events (:mod:`bench.soak.run`).

``make test`` runs a short version (``test_soak.py``); ``make soak-short`` the issue's 60 s run
at 2k events/s and ``make soak`` the 30-minute one (``python -m bench.soak``).
"""
