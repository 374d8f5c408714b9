"""The service's routes, one ``APIRouter`` per module."""
