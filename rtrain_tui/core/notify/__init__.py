"""Notifications: a message when a run ends or stalls, sent once to the user's apprise URLs."""
