"""Alerts on new incidents: a message to a webhook (Slack, Mattermost, Teams or any receiver of JSON) for every
new or changed diagnosis that is not healthy (docs/operations.md, "Alerts").

- ``config.py``   NotifyConfig: the receivers, the filters, the secret; the ``[notify]`` section of a config file
- ``message.py``  the message of one diagnosis (one function: a field is one line)
- ``deliver.py``  one POST with a timeout, signed with HMAC-SHA256 when a secret is set
- ``outbox.py``   Notifier: a pass derives the messages from the stored diagnoses into the catalog's outbox
                  (frlake.catalog.notify), then delivers what is due, with retries and backoff
"""
