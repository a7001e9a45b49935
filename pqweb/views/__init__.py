"""The pages of the dashboard, one module per screen; each exports ``ROUTES``."""
