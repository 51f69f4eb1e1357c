"""``python -m broker_plugin``: build the broker plugin's jar (``broker_plugin.build``) and print its path."""

from broker_plugin import build

print(build())
