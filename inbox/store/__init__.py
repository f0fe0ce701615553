"""The only package that talks SQL. Callers get frozen dataclasses back."""
