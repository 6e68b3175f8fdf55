"""Image files: size and mode at plan time (Pillow), RGB pixels at execution."""

from pathlib import Path

from genrun.schemas import ImageFacts


class ImageUndecodable(ValueError):
    """The file is not an image Pillow can open."""


def image_facts(path: Path) -> ImageFacts:
    """Open and fully decode the image once (a truncated file fails here, not at execution)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.load()
            return ImageFacts(width=image.width, height=image.height, mode=image.mode, format=image.format)
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ImageUndecodable(str(exc)) from None


def load_image(path: Path):
    """The image as RGB (`PIL.Image.Image`)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")
