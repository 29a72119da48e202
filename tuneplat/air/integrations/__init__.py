"""``ray.air.integrations``: :mod:`tuneplat.air.integrations.mlflow`."""
